package snapshot

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/steadyplane/steadyplane/pkg/etcd"
)

// member runs a real etcd member (plain HTTP on loopback) on dataDir as
// a new cluster of one named name until the test ends, and returns its
// client URL.
func member(t *testing.T, name, dataDir string) string {
	t.Helper()
	ports := freePorts(t, 2)
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	o := etcd.NewOptions()
	o.Name, o.DataDir, o.LogLevel, o.StartTimeout = name, dataDir, "fatal", 30*time.Second
	o.ListenClientURLs, o.AdvertiseClientURLs = []string{client}, []string{client}
	o.ListenPeerURLs, o.InitialAdvertisePeerURLs = []string{peer}, []string{peer}
	o.InitialCluster = name + "=" + peer
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- etcd.Run(ctx, o, func(*embed.Etcd) { close(ready) }) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("etcd member %s: %v", name, err)
	case <-time.After(40 * time.Second):
		t.Fatalf("etcd member %s not ready in 40s", name)
	}
	return client
}

// freePorts are n loopback ports free a moment ago (testenv's helper
// would import the control plane, which imports this package).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out
}

func client(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSaveAndRestore saves a snapshot of a member with keys, refuses it
// torn, cut, for another cluster and without its record, and restores
// it into a new member of another name: the keys are there at their
// revisions, the new member is the cluster's only one, and writes go on.
func TestSaveAndRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	work := t.TempDir()
	endpoint := member(t, "first", filepath.Join(work, "etcd"))
	c := client(t, endpoint)
	for i := range 100 {
		if _, err := c.Put(ctx, fmt.Sprintf("/registry/k%03d", i), strings.Repeat("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Delete(ctx, "/registry/k000"); err != nil {
		t.Fatal(err)
	}
	before, err := c.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(work, "snapshots")
	m, err := Save(ctx, clientv3.Config{DialTimeout: 5 * time.Second, Logger: zap.NewNop()}, endpoint, dir,
		Meta{Name: Name("first", false, time.Now()), Cluster: "sha256:one", Node: "first", Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if m.Revision < before.Header.Revision || m.Size == 0 || m.EtcdVersion == "" {
		t.Errorf("Meta %+v: want revision ≥ %d, a size and etcd's version", m, before.Header.Revision)
	}
	for _, f := range []string{m.DB(dir), m.JSON(dir)} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want 0600", f, fi, err)
		}
	}
	if _, err := Verify(m.DB(dir), "sha256:one"); err != nil {
		t.Fatalf("Verify of a whole snapshot: %v", err)
	}

	// Refused: another cluster's, one cut short, one changed, one with no record.
	if _, err := Verify(m.DB(dir), "sha256:two"); err == nil || !strings.Contains(err.Error(), "another cluster") {
		t.Errorf("Verify for another cluster: %v", err)
	}
	whole, _ := os.ReadFile(m.DB(dir))
	bad := func(name string, data []byte) string {
		p := filepath.Join(dir, name+".db")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		rec := m
		rec.Name = name
		if err := os.WriteFile(rec.JSON(dir), []byte(fmt.Sprintf(`{"name":%q,"cluster":"sha256:one","sha256":%q,"size":%d}`, name, m.SHA256, m.Size)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	changed := append([]byte(nil), whole...)
	changed[len(changed)/2] ^= 0xff
	for name, data := range map[string][]byte{"cut": whole[:len(whole)/2], "changed": changed, "trailer-only": whole[len(whole)-32:]} {
		if _, err := Verify(bad(name, data), "sha256:one"); !errors.Is(err, ErrTorn) {
			t.Errorf("Verify of a %s snapshot: %v, want ErrTorn", name, err)
		}
	}
	orphan := filepath.Join(work, "orphan.db")
	if err := os.WriteFile(orphan, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(orphan, "sha256:one"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Verify of a snapshot without its record: %v", err)
	}

	// Restored into a new member's data directory.
	target := filepath.Join(work, "restored")
	if err := os.MkdirAll(target, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "old"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	staging, err := Prepare(m.DB(dir), target)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := Swap(staging, target, "test")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(kept, "old")); err != nil || string(b) != "kept" {
		t.Errorf("the data before the restore is not kept in %s: %v", kept, err)
	}
	restored := client(t, member(t, "second", target))
	after, err := restored.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Kvs) != len(before.Kvs) || len(after.Kvs) != 99 {
		t.Fatalf("restored %d keys, want %d", len(after.Kvs), len(before.Kvs))
	}
	for i, kv := range after.Kvs {
		want := before.Kvs[i]
		if string(kv.Key) != string(want.Key) || string(kv.Value) != string(want.Value) || kv.ModRevision != want.ModRevision {
			t.Errorf("restored %s@%d, want %s@%d", kv.Key, kv.ModRevision, want.Key, want.ModRevision)
		}
	}
	members, err := restored.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Members) != 1 || members.Members[0].Name != "second" {
		t.Errorf("members after the restore: %v, want the new member alone", members.Members)
	}
	put, err := restored.Put(ctx, "/registry/after", "x")
	if err != nil {
		t.Fatal(err)
	}
	if put.Header.Revision <= before.Header.Revision+RevisionBump {
		t.Errorf("a write after the restore got revision %d, want more than the snapshot's %d + %d", put.Header.Revision, before.Header.Revision, RevisionBump)
	}
	// A client that had read at the snapshot's revision, or watched from
	// a later one of the old cluster, is told it is compacted.
	for _, rev := range []int64{before.Header.Revision, before.Header.Revision + 50} {
		if _, err := restored.Get(ctx, "/registry/k001", clientv3.WithRev(rev)); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Errorf("a read at revision %d after the restore: %v, want compacted", rev, err)
		}
	}
}

func TestPrune(t *testing.T) {
	at := func(h int, node string, scheduled bool, incomplete string) Listed {
		return Listed{Meta: Meta{Name: fmt.Sprintf("s%02d", h), Node: node, Scheduled: scheduled, Created: time.Date(2026, 11, 27, h, 0, 0, 0, time.UTC)}, Incomplete: incomplete}
	}
	names := func(l []Listed) string {
		var out []string
		for _, x := range l {
			out = append(out, x.Name)
		}
		return strings.Join(out, ",")
	}
	list := []Listed{at(1, "a", true, ""), at(2, "a", false, ""), at(3, "a", true, ""), at(4, "a", true, "no record"), at(5, "a", true, ""), at(6, "b", true, ""), at(7, "a", true, "")}
	for _, tc := range []struct {
		keep int
		want string
	}{{5, ""}, {4, ""}, {3, "s01"}, {2, "s01,s03"}, {1, "s01,s03,s05"}, {0, ""}} {
		if got := names(Prune(list, "a", tc.keep)); got != tc.want {
			t.Errorf("Prune(keep %d) = %q, want %q (on-demand, incomplete and other nodes' snapshots are never pruned)", tc.keep, got, tc.want)
		}
	}
}

func TestNextScheduled(t *testing.T) {
	day := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	at := func(h int, node string, scheduled bool) Listed {
		return Listed{Meta: Meta{Node: node, Scheduled: scheduled, Created: day.Add(time.Duration(h) * time.Hour)}}
	}
	for _, tc := range []struct {
		name string
		list []Listed
		now  time.Time
		want time.Time
	}{
		{"none yet: now", nil, day, day},
		{"only on-demand and other nodes': now", []Listed{at(1, "a", false), at(2, "b", true)}, day.Add(3 * time.Hour), day.Add(3 * time.Hour)},
		{"an interval after the newest", []Listed{at(1, "a", true), at(5, "a", true)}, day.Add(6 * time.Hour), day.Add(17 * time.Hour)},
		{"late (up was down): now", []Listed{at(1, "a", true)}, day.Add(20 * time.Hour), day.Add(20 * time.Hour)},
	} {
		if got := NextScheduled(tc.list, "a", 12*time.Hour, tc.now); !got.Equal(tc.want) {
			t.Errorf("%s: NextScheduled = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestListAndDelete(t *testing.T) {
	dir := t.TempDir()
	older, newer := Meta{Name: "a", Cluster: "sha256:x", SHA256: "00", Created: time.Unix(100, 0)}, Meta{Name: "b", Cluster: "sha256:x", SHA256: "00", Created: time.Unix(200, 0)}
	for _, m := range []Meta{newer, older} {
		if err := os.WriteFile(m.DB(dir), []byte("db"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(m.JSON(dir), []byte(fmt.Sprintf(`{"name":%q,"cluster":"sha256:x","sha256":"00","created":%q}`, m.Name, m.Created.Format(time.RFC3339))), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "torn.db"), []byte("db"), 0o600); err != nil {
		t.Fatal(err)
	}
	list, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0].Name != "a" || list[1].Name != "b" || list[2].Name != "torn" || list[2].Incomplete == "" {
		t.Fatalf("List = %+v, want a, b, then the torn one (its file's time, now)", list)
	}
	if err := Delete(dir, "a.db"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(older.JSON(dir)); !os.IsNotExist(err) {
		t.Errorf("a's record after its delete: %v", err)
	}
	if err := Delete(dir, "a"); err == nil {
		t.Error("deleting a snapshot twice: no error")
	}
	if err := Delete(dir, "../../etc/passwd"); err == nil {
		t.Error("a name outside the directory: no error")
	}
}
