package pruner

import (
	"fmt"
	"testing"
)

func TestSplit(t *testing.T) {
	revs := func(n int) []int {
		r := make([]int, n)
		for i := range r {
			r[i] = i + 1
		}
		return r
	}
	for _, c := range []struct {
		name         string
		revisions    []int
		keep         int
		p            Protected
		kept, pruned string
	}{
		{"nothing to prune", revs(3), 5, Protected{Current: 3}, "[1 2 3]", "[]"},
		{"the newest keep", revs(8), 3, Protected{Current: 8}, "[6 7 8]", "[1 2 3 4 5]"},
		{"last-known-good is kept however old", revs(8), 3, Protected{Current: 8, LastKnownGood: 2}, "[2 6 7 8]", "[1 3 4 5]"},
		{"the current revision after a fallback is kept", revs(8), 2, Protected{Current: 4, Target: 8, LastFailed: 8, LastKnownGood: 4}, "[4 7 8]", "[1 2 3 5 6]"},
		{"the last failed is kept", revs(10), 2, Protected{Current: 10, LastFailed: 5}, "[5 9 10]", "[1 2 3 4 6 7 8]"},
		{"keep 0 keeps only the protected", revs(4), 0, Protected{Current: 3, LastKnownGood: 3}, "[3]", "[1 2 4]"},
		{"unsorted input, duplicates and zero", []int{5, 0, 2, 5, 1, 4, 3}, 2, Protected{}, "[4 5]", "[1 2 3]"},
		{"no revisions", nil, 3, Protected{Current: 1}, "[]", "[]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			kept, pruned := Split(c.revisions, c.keep, c.p)
			if fmt.Sprint(nonNil(kept)) != c.kept || fmt.Sprint(nonNil(pruned)) != c.pruned {
				t.Errorf("Split = kept %v pruned %v, want %s %s", kept, pruned, c.kept, c.pruned)
			}
		})
	}
}

func nonNil(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}
