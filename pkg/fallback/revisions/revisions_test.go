package revisions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func layout(t *testing.T, revs ...int) Layout {
	t.Helper()
	l := ForDataDir(t.TempDir(), "kube-apiserver")
	for _, n := range revs {
		if err := os.MkdirAll(l.RevisionDir(n), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(l.RevisionManifest(n), []byte(fmt.Sprintf("revision %d", n)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func TestRevisionsIgnoresOtherEntries(t *testing.T) {
	l := layout(t, 10, 2, 1)
	for _, junk := range []string{"kube-apiserver-pod-x", "kube-apiserver-pod-01", "kube-apiserver-pod--1", "etcd-pod-4", "kube-apiserver-pod-0"} {
		if err := os.MkdirAll(filepath.Join(l.ResourcesDir, junk), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(l.ResourcesDir, "kube-apiserver-pod-7"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	revs, err := l.Revisions()
	if err != nil || fmt.Sprint(revs) != "[1 2 10]" {
		t.Fatalf("Revisions = %v, %v", revs, err)
	}
	if revs, err := ForDataDir(t.TempDir(), "kube-apiserver").Revisions(); err != nil || revs != nil {
		t.Fatalf("no directory: %v, %v", revs, err)
	}
}

func TestLastKnownGoodAndFallbackTarget(t *testing.T) {
	l := layout(t, 1, 2, 3, 4)
	for _, c := range []struct {
		name   string
		lkg    int // 0: no link
		failed int
		want   int // 0: nothing to fall back to
	}{
		{"the link wins", 2, 4, 2},
		{"no link: the newest earlier revision", 0, 4, 3},
		{"no link, the first revision failed: bootstrap, nothing", 0, 1, 0},
		{"the link points at the failed revision: the newest earlier", 3, 3, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			_ = os.Remove(l.LastKnownGoodLink())
			if c.lkg != 0 {
				if err := l.SetLastKnownGood(c.lkg); err != nil {
					t.Fatal(err)
				}
				if got, err := l.LastKnownGood(); err != nil || got != c.lkg {
					t.Fatalf("LastKnownGood = %d, %v", got, err)
				}
			}
			n, ok, err := l.FallbackTarget(c.failed)
			if err != nil || n != c.want || ok != (c.want != 0) {
				t.Fatalf("FallbackTarget(%d) = %d %v %v, want %d", c.failed, n, ok, err, c.want)
			}
		})
	}
	// The link is relative: the data directory can move.
	target, _ := os.Readlink(l.LastKnownGoodLink())
	if filepath.IsAbs(target) {
		t.Errorf("link target %q is absolute", target)
	}
	if err := l.SetLastKnownGood(9); err == nil {
		t.Error("marking a revision with no manifest good succeeded")
	}
	if err := os.Remove(l.LastKnownGoodLink()); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", l.LastKnownGoodLink()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.LastKnownGood(); err == nil {
		t.Error("a link elsewhere was taken for a revision")
	}
}

func TestLockExcludesAndIsReleasedOnClose(t *testing.T) {
	l := layout(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	unlock, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if _, err := l.Lock(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second holder got the lock: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		u, err := l.Lock(ctx)
		if err == nil {
			u()
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter never got the released lock")
	}
	if st, err := os.Stat(l.LockPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: %v %v", st, err)
	}
}
