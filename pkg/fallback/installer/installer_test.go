package installer

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/steadyplane/steadyplane/pkg/fallback/revisions"
)

func manifest(rev string) []byte {
	return []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  namespace: kube-system\n  annotations:\n    steadyplane.io/revision: \"" + rev + "\"\nspec:\n  containers:\n  - name: kube-apiserver\n    image: steadyplane\n")
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestInstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := revisions.ForDataDir(t.TempDir(), "kube-apiserver")
	if _, err := Install(ctx, l, Revision{Number: 1, Operand: manifest("1")}, Options{Keep: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.MonitorManifest()); err == nil {
		t.Error("bootstrap installed a startup monitor")
	}
	if err := l.SetLastKnownGood(1); err != nil {
		t.Fatal(err)
	}
	r2 := Revision{Number: 2, Operand: manifest("2"), Monitor: []byte("monitor 2"),
		ConfigMaps: map[string]map[string][]byte{"audit": {"policy.yaml": []byte("rules: []")}},
		Secrets:    map[string]map[string][]byte{"token": {"key": []byte("s3cret")}}}
	if _, err := Install(ctx, l, r2, Options{Keep: 1}); err != nil {
		t.Fatal(err)
	}
	if got := l.InstalledRevision(); got != 2 {
		t.Errorf("operand at revision %d, want 2", got)
	}
	if b, _ := os.ReadFile(l.MonitorManifest()); string(b) != "monitor 2" {
		t.Errorf("monitor manifest %q", b)
	}
	cm := filepath.Join(l.RevisionDir(2), "configmaps", "audit", "policy.yaml")
	sec := filepath.Join(l.RevisionDir(2), "secrets", "token", "key")
	if b, _ := os.ReadFile(cm); string(b) != "rules: []" {
		t.Errorf("configmap file %q", b)
	}
	for path, want := range map[string]os.FileMode{cm: 0o644, sec: 0o600, filepath.Dir(sec): 0o700, l.OperandManifest(): 0o600, l.RevisionManifest(2): 0o600, l.MonitorManifest(): 0o600} {
		if got := mode(t, path); got != want {
			t.Errorf("%s: mode %o, want %o", path, got, want)
		}
	}
	// Run again (an installer restarted after it died): same result.
	if _, err := Install(ctx, l, r2, Options{Keep: 1}); err != nil {
		t.Errorf("installing revision 2 again: %v", err)
	}
	// A revision never changes.
	r2.Operand = manifest("2-other")
	if _, err := Install(ctx, l, r2, Options{}); err == nil || !strings.Contains(err.Error(), "never changes") {
		t.Errorf("a changed revision 2 was installed: %v", err)
	}
	// Revision 3 with keep 1: 1 is last-known-good, 2 is current, 3 the target.
	pruned, err := Install(ctx, l, Revision{Number: 3, Operand: manifest("3")}, Options{Keep: 1})
	if err != nil || len(pruned) != 0 {
		t.Errorf("pruned %v (%v), want none: all protected", pruned, err)
	}
	// Revision 4: 2 goes (neither current, target, failed nor last-known-good).
	pruned, err = Install(ctx, l, Revision{Number: 4, Operand: manifest("4")}, Options{Keep: 1})
	if err != nil || !slices.Equal(pruned, []int{2}) {
		t.Errorf("pruned %v (%v), want [2]", pruned, err)
	}
	if got, _ := l.Revisions(); !slices.Equal(got, []int{1, 3, 4}) {
		t.Errorf("revisions left %v, want [1 3 4]", got)
	}
	if _, err := os.Stat(l.MonitorManifest()); err == nil {
		t.Error("a revision without a monitor left the previous monitor's manifest")
	}
}

func TestInstallRefusesUnsafeNames(t *testing.T) {
	ctx := context.Background()
	l := revisions.ForDataDir(t.TempDir(), "kube-apiserver")
	for _, r := range []Revision{
		{Number: 1, Operand: manifest("1"), ConfigMaps: map[string]map[string][]byte{"..": {"k": nil}}},
		{Number: 1, Operand: manifest("1"), Secrets: map[string]map[string][]byte{"s": {"../../manifests/x.yaml": nil}}},
		{Number: 0, Operand: manifest("0")},
	} {
		if _, err := Install(ctx, l, r, Options{}); err == nil {
			t.Errorf("installed %+v", r)
		}
		if _, err := os.Stat(l.OperandManifest()); err == nil {
			t.Fatalf("operand manifest written for a refused revision %+v", r)
		}
	}
	if got, _ := l.Revisions(); len(got) != 0 {
		t.Errorf("revisions %v left by refused installs", got)
	}
}

// The lock keeps an installer out while a startup monitor holds it.
func TestInstallWaitsForTheLock(t *testing.T) {
	l := revisions.ForDataDir(t.TempDir(), "kube-apiserver")
	unlock, err := l.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Install(ctx, l, Revision{Number: 1, Operand: manifest("1")}, Options{}); err == nil {
		t.Error("installed while the lock was held")
	}
	unlock()
	if _, err := Install(context.Background(), l, Revision{Number: 1, Operand: manifest("1")}, Options{}); err != nil {
		t.Errorf("after unlock: %v", err)
	}
}
