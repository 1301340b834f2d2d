package pki

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestExpiries(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := (&Store{Dir: dir}).EnsureCluster(ClusterConfig{}); err != nil {
		t.Fatal(err)
	}
	all, err := ExpiriesOfDir(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	cas, leaves := 0, 0
	for i, e := range all {
		if i > 0 && e.NotAfter.Before(all[i-1].NotAfter) {
			t.Errorf("not soonest first: %s after %s", e.File, all[i-1].File)
		}
		if e.CA {
			cas++
			if !strings.HasPrefix(e.RenewedBy, "nothing") {
				t.Errorf("CA %s renewed by %q", e.File, e.RenewedBy)
			}
		} else {
			leaves++
			if !strings.HasPrefix(e.RenewedBy, "up") {
				t.Errorf("%s renewed by %q", e.File, e.RenewedBy)
			}
		}
	}
	if cas != 4 || leaves < 6 || !all[len(all)-1].CA {
		t.Errorf("%d CAs and %d leaves, the last %+v; want the 4 CAs last", cas, leaves, all[len(all)-1])
	}
	if _, err := ExpiriesOfDir(t.TempDir()); err == nil {
		t.Error("a directory with no certificate: no error")
	}
	if err := os.WriteFile(filepath.Join(dir, "torn.crt"), []byte("-----BEGIN CERTIFICATE-----\nAAAA"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Expiries(ByServer, dir); err == nil || !strings.Contains(err.Error(), "torn.crt") {
		t.Errorf("a torn certificate: %v, want an error naming it", err)
	}
}

func TestExpiryLeftAndRenewer(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		after time.Duration
		want  string
	}{{-time.Hour, "expired"}, {0, "expired"}, {90 * time.Minute, "1h30m"}, {72 * time.Hour, "3d"}, {364 * 24 * time.Hour, "364d"}} {
		if got := (Expiry{NotAfter: now.Add(tc.after)}).Left(now); got != tc.want {
			t.Errorf("Left(%v) = %q, want %q", tc.after, got, tc.want)
		}
	}
	for _, tc := range []struct {
		r    Renewer
		ca   bool
		want string
	}{{ByServer, false, "up, while it runs"}, {ByServer, true, "nothing"}, {ByWorker, false, "node, while it runs"}, {ByWorker, true, "a copy of the cluster CA"}} {
		if got := RenewedBy(tc.r, tc.ca); !strings.HasPrefix(got, tc.want) {
			t.Errorf("RenewedBy(%s, CA %v) = %q, want %q…", tc.r, tc.ca, got, tc.want)
		}
	}
}
