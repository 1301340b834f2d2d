package healthz

import (
	"slices"
	"testing"
)

func TestFailedChecks(t *testing.T) {
	for _, c := range []struct {
		verbose string
		want    []string
	}{
		{"[+]ping ok\n[+]etcd ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n[+]poststarthook/generic-apiserver-start-informers ok\n" +
			"[-]poststarthook/steadyplane-initialization-probe failed: not finished\nreadyz check failed\n",
			[]string{"poststarthook/rbac/bootstrap-roles", "poststarthook/steadyplane-initialization-probe"}},
		{"[-]etcd-readiness failed: reason withheld", []string{"etcd-readiness"}},
		{"  [-]etcd failed: reason withheld\r", []string{"etcd"}},
		{"ok", nil},
		{"[-]", nil},
		{"Internal error\n[-", nil},
		{"", nil},
	} {
		if got := FailedChecks(c.verbose); !slices.Equal(got, c.want) {
			t.Errorf("FailedChecks(%q) = %q, want %q", c.verbose, got, c.want)
		}
	}
}
