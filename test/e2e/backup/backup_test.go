// Package backup tests etcd snapshots end to end: the README's "Backups"
// walkthrough on a running up, the schedule's retention, a torn snapshot
// refused with nothing changed, and a restore that brings back a deleted
// namespace.
package backup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/steadyplane/steadyplane/internal/testci"
	"github.com/steadyplane/steadyplane/internal/testup"
	"github.com/steadyplane/steadyplane/pkg/etcd/snapshot"
)

// TestSnapshotAndRestore runs up with a short snapshot schedule, makes a
// namespace, runs the README's walkthrough (a snapshot now, the list),
// deletes the namespace, stops up, is refused a torn copy of the
// snapshot (the etcd data untouched), restores the snapshot with up's own
// flags, starts up again and finds the namespace and its ConfigMap back.
func TestSnapshotAndRestore(t *testing.T) {
	if testing.Short() {
		testci.CannotRun(t, "-short: this test runs steadyplane up three times")
	}
	bin, dataDir, ports, ctx := testup.Setup(t, 12*time.Minute)
	work := filepath.Dir(dataDir)
	dataDir = filepath.Join(work, ".steadyplane")
	kubeconfig := filepath.Join(dataDir, "admin.kubeconfig")
	// No kube-proxy or DNS: other test packages run up on this network
	// namespace at the same time, and two kube-proxies would fight.
	hostOnly := []string{"--proxy=false", "--dns=false"}
	up := testup.Start(t, bin, dataDir, ports, append(hostOnly, "--etcd-snapshot-interval", "10s", "--etcd-snapshot-retention", "2")...)
	up.WaitUp(t, 4*time.Minute)
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := testup.Kubectl(t, ctx, kubeconfig, args...)
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return out
	}
	kubectl("create", "namespace", "keep-me")
	kubectl("-n", "keep-me", "create", "configmap", "data", "--from-literal=answer=42")

	block := testup.ReadmeBlock(t, "Backups")
	lines := strings.Split(strings.TrimSpace(block), "\n")
	restoreLine := lines[len(lines)-1]
	out := testup.RunScript(t, ctx, "the walkthrough", work, block[:strings.Index(block, restoreLine)]+`echo "SNAPSHOT=$snapshot"`+"\n", filepath.Dir(bin))
	_, path, ok := strings.Cut(out, "SNAPSHOT=")
	path = strings.TrimSpace(path)
	if !ok || !strings.HasPrefix(path, filepath.Join(dataDir, snapshot.DirName)) {
		t.Fatalf("etcd-snapshot save printed no path in %s:\n%s", filepath.Join(dataDir, snapshot.DirName), out)
	}
	if !strings.Contains(out, filepath.Base(strings.TrimSuffix(path, ".db"))) || !strings.Contains(out, "on-demand") {
		t.Errorf("etcd-snapshot list does not show the snapshot just taken:\n%s", out)
	}
	for _, f := range []string{path, strings.TrimSuffix(path, ".db") + ".json"} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want 0600", f, fi, err)
		}
	}

	kubectl("delete", "namespace", "keep-me", "--wait=true", "--timeout=2m")
	if out, err := testup.Kubectl(t, ctx, kubeconfig, "get", "namespace", "keep-me"); err == nil {
		t.Fatalf("namespace keep-me still there after its delete:\n%s", out)
	}

	// The schedule kept its newest two (at least three were taken by now).
	testup.WaitFor(t, ctx, time.Minute, "three scheduled snapshots", func() (bool, string) {
		n := strings.Count(up.Text(), "etcd snapshot "+filepath.Join(dataDir, snapshot.DirName))
		return n >= 3, strings.Repeat("saved ", n)
	})
	up.Stop(t)
	list, err := snapshot.List(filepath.Join(dataDir, snapshot.DirName))
	if err != nil {
		t.Fatal(err)
	}
	scheduled, onDemand := 0, 0
	for _, l := range list {
		switch {
		case l.Incomplete != "":
			t.Logf("snapshot %s: a save up's stop cut short (%s)", l.Name, l.Incomplete)
		case l.Scheduled:
			scheduled++
		default:
			onDemand++
		}
	}
	if scheduled != 2 || onDemand != 1 {
		t.Errorf("snapshots kept: %d scheduled, %d on demand (%+v); want 2 (--etcd-snapshot-retention) and the one saved", scheduled, onDemand, list)
	}

	// A torn copy is refused before anything changes.
	etcdData := filepath.Join(dataDir, "etcd")
	before := tree(t, etcdData)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(work, "torn.db")
	if err := os.WriteFile(torn, whole[:len(whole)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	record, _ := os.ReadFile(strings.TrimSuffix(path, ".db") + ".json")
	if err := os.WriteFile(filepath.Join(work, "torn.json"), record, 0o600); err != nil {
		t.Fatal(err)
	}
	restore := func(snapshotPath string) (string, error) {
		cmdPart, _, _ := strings.Cut(restoreLine, " && ")
		flags, ok := strings.CutPrefix(cmdPart, "steadyplane up ")
		if !ok {
			t.Fatalf("the README's restore line is not an up command: %q", restoreLine)
		}
		args := append(up.Args(), strings.Fields(strings.ReplaceAll(flags, `"$snapshot"`, snapshotPath))...)
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(cctx, bin, args...).CombinedOutput()
		t.Logf("up %s:\n%s", flags, out)
		return string(out), err
	}
	if out, err := restore(torn); err == nil || !strings.Contains(out, "not a whole etcd snapshot") {
		t.Errorf("a torn snapshot: %v, want it refused as not whole", err)
	}
	if after := tree(t, etcdData); after != before {
		t.Errorf("a refused restore changed %s:\nbefore %s\nafter  %s", etcdData, before, after)
	}

	if out, err := restore(path); err != nil {
		t.Fatalf("the restore failed: %v", err)
	} else if !strings.Contains(out, "etcd runs on the snapshot's data") {
		t.Errorf("the restore does not say where the data it replaced is kept")
	}
	up = testup.Start(t, bin, dataDir, ports, append(hostOnly, "--etcd-snapshot-interval", "0")...)
	up.WaitUp(t, 4*time.Minute)
	defer up.Stop(t)
	testup.WaitFor(t, ctx, 2*time.Minute, "namespace keep-me back with its ConfigMap", func() (bool, string) {
		out, err := testup.Kubectl(t, ctx, kubeconfig, "-n", "keep-me", "get", "configmap", "data", "-o", "jsonpath={.data.answer}")
		return err == nil && out == "42", out
	})
	if out, err := testup.Kubectl(t, ctx, kubeconfig, "get", "namespace", "keep-me", "-o", "jsonpath={.status.phase}"); err != nil || out != "Active" {
		t.Errorf("namespace keep-me after the restore: %q, %v; want Active", out, err)
	}
}

// tree lists dir's files with their sizes and times: what a refused
// restore must leave as it was.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d %s\n", path, fi.Size(), fi.ModTime())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + ".restoring"); err == nil {
		b.WriteString("a staging directory was left\n")
	}
	return b.String()
}
