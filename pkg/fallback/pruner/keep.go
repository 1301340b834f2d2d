// Package pruner decides which revisions of a static pod may be removed
// from the node and from the API (their revisioned ConfigMaps and Secrets).
package pruner

import (
	"slices"
)

// Protected are the revisions that are never pruned, however old: the one
// running, the one being rolled out, the last one that failed (its files
// are the evidence), and the one last-known-good points to (falling back
// needs it; the reference implementation does not protect it explicitly).
// Zero means none.
type Protected struct {
	Current, Target, LastFailed, LastKnownGood int
}

// Split divides revisions into the ones kept (the newest keep of them and
// every protected one) and the ones to prune, both in ascending order.
// Revisions below 1 and duplicates are ignored; keep below 1 keeps only the
// protected ones.
func Split(revisions []int, keep int, p Protected) (kept, pruned []int) {
	sorted := slices.Clone(revisions)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	protected := []int{p.Current, p.Target, p.LastFailed, p.LastKnownGood}
	for i, r := range sorted {
		if r < 1 {
			continue
		}
		newest := len(sorted)-i <= keep
		if newest || slices.Contains(protected, r) {
			kept = append(kept, r)
		} else {
			pruned = append(pruned, r)
		}
	}
	return kept, pruned
}
