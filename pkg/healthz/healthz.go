// Package healthz reads the verbose answers of the API server's health
// endpoints (/healthz, /livez, /readyz with ?verbose).
package healthz

import "strings"

// FailedChecks returns the names of the failing checks in a verbose answer,
// in order: "[-]poststarthook/rbac/bootstrap-roles failed: reason withheld"
// gives "poststarthook/rbac/bootstrap-roles".
func FailedChecks(verbose string) []string {
	var out []string
	for _, line := range strings.Split(verbose, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "[-]")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, " ")
		if name != "" {
			out = append(out, name)
		}
	}
	return out
}
