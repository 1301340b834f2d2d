// Package snapshot keeps a server's etcd snapshots: saved through etcd's
// snapshot API (consistent, with etcd's own sha256 trailer), written
// atomically and 0600 beside a record of what they are (Meta), listed,
// pruned on a schedule's retention, and restored into a data directory
// as a cluster of one.
//
// A snapshot is <dir>/<name>.db, a file etcdctl and etcdutl read too, and
// <dir>/<name>.json, its Meta. A .db without its .json is the remains of
// a save that did not finish, and is never restored.
package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdsnapshot "go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
)

// Meta is what a snapshot is: kept as <name>.json beside <name>.db.
type Meta struct {
	// Name is the file's name without .db.
	Name string `json:"name"`
	// Cluster pins the cluster CA's public key (sha256:<hex>, as a join
	// token does): a snapshot restores only into its own cluster.
	Cluster string `json:"cluster"`
	// Node is the server that took it; Scheduled says the schedule did
	// (only those are pruned).
	Node      string `json:"node"`
	Scheduled bool   `json:"scheduled,omitempty"`
	// Created is when it was taken; Revision etcd's revision then.
	Created  time.Time `json:"created"`
	Revision int64     `json:"revision"`
	// EtcdVersion is the version of the etcd that served it.
	EtcdVersion string `json:"etcdVersion"`
	// Size is the .db file's size; SHA256 its digest (hex), checked
	// before a restore.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// DB is the snapshot's database file in dir; JSON its Meta.
func (m Meta) DB(dir string) string   { return filepath.Join(dir, m.Name+".db") }
func (m Meta) JSON(dir string) string { return filepath.Join(dir, m.Name+".json") }

// Name is a snapshot's name: on-demand-<node>-<time> for one a user
// asked for, etcd-snapshot-<node>-<time> for the schedule's (k3s's
// names).
func Name(node string, scheduled bool, at time.Time) string {
	prefix := "on-demand"
	if scheduled {
		prefix = "etcd-snapshot"
	}
	return fmt.Sprintf("%s-%s-%s", prefix, node, at.UTC().Format("20060102T150405Z"))
}

// Save takes a snapshot of the member at endpoint (one: a snapshot is
// one member's view, consistent in itself) into dir as m.Name, with
// cfg's credentials, and returns its Meta, written last: a .db whose
// .json is missing is a save that did not finish.
func Save(ctx context.Context, cfg clientv3.Config, endpoint, dir string, m Meta) (Meta, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return m, err
	}
	cfg.Endpoints = []string{endpoint}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return m, err
	}
	// A linearizable read through the member first: it answers once the
	// member has applied everything the cluster committed before, so the
	// snapshot holds every write acknowledged before the save, on
	// whichever server it is taken. Without a quorum that read fails, and
	// the member's own view (its status) is what a snapshot can be.
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	read, err := cli.Get(rctx, "steadyplane-snapshot", clientv3.WithCountOnly())
	cancel()
	if err == nil {
		m.Revision = read.Header.Revision
	} else {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		status, serr := cli.Status(sctx, endpoint)
		cancel()
		if serr != nil {
			cli.Close()
			return m, fmt.Errorf("etcd at %s does not answer (is up running on this data directory?): %w", endpoint, serr)
		}
		m.Revision = status.Header.Revision
	}
	cli.Close()
	db := m.DB(dir)
	if m.EtcdVersion, err = etcdsnapshot.SaveWithVersion(ctx, zap.NewNop(), cfg, db); err != nil {
		return m, fmt.Errorf("etcd snapshot from %s: %w", endpoint, err)
	}
	sum, size, err := Check(db)
	if err != nil {
		_ = os.Remove(db)
		return m, err
	}
	m.SHA256, m.Size = sum, size
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	if err := atomicfile.WriteFile(m.JSON(dir), append(data, '\n'), 0o600); err != nil {
		_ = os.Remove(db)
		return m, err
	}
	return m, nil
}

// ErrTorn says a snapshot file is not whole: etcd's sha256 trailer is
// missing or does not match what precedes it.
var ErrTorn = errors.New("not a whole etcd snapshot: its sha256 trailer is missing or does not match (a copy cut short, or another file)")

// Check reads the snapshot file at path and says whether it is whole:
// etcd ends a snapshot with the sha256 of what comes before. It returns
// the whole file's sha256 (hex) and size.
func Check(path string) (sum string, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	size = fi.Size()
	// etcd's snapshots are whole 512-byte sectors and the 32-byte trailer.
	if size < sha256.Size || size%512 != sha256.Size {
		return "", size, fmt.Errorf("%s: %w", path, ErrTorn)
	}
	body, whole := sha256.New(), sha256.New()
	if _, err := io.Copy(io.MultiWriter(body, whole), io.LimitReader(f, size-sha256.Size)); err != nil {
		return "", size, err
	}
	trailer := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, trailer); err != nil {
		return "", size, fmt.Errorf("%s: %w", path, ErrTorn)
	}
	whole.Write(trailer)
	if !bytes.Equal(body.Sum(nil), trailer) {
		return "", size, fmt.Errorf("%s: %w", path, ErrTorn)
	}
	return hex.EncodeToString(whole.Sum(nil)), size, nil
}

// Verify checks the snapshot at path before a restore into the cluster
// whose CA cluster pins: its Meta beside it, for this cluster, and its
// content whole and the one the Meta names. Nothing is written.
func Verify(path, cluster string) (Meta, error) {
	dir, file := filepath.Split(path)
	name, ok := strings.CutSuffix(file, ".db")
	if !ok {
		return Meta{}, fmt.Errorf("%s: a snapshot is a .db file (steadyplane etcd-snapshot list shows them)", path)
	}
	m, err := ReadMeta(filepath.Join(dir, name+".json"))
	if err != nil {
		return Meta{}, err
	}
	if m.Cluster != cluster {
		return m, fmt.Errorf("%s is a snapshot of another cluster (CA %s, this data directory's is %s): it is not restored", path, m.Cluster, cluster)
	}
	sum, size, err := Check(path)
	if err != nil {
		return m, err
	}
	if sum != m.SHA256 || size != m.Size {
		return m, fmt.Errorf("%s: %d bytes with sha256 %s, but it was saved as %d bytes with sha256 %s: %w", path, size, sum, m.Size, m.SHA256, ErrTorn)
	}
	return m, nil
}

// ReadMeta reads a snapshot's .json.
func ReadMeta(path string) (Meta, error) {
	var m Meta
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return m, fmt.Errorf("%s is missing: without it the snapshot is a save that did not finish, or not steadyplane's", path)
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%s: %w", path, err)
	}
	if m.Name == "" || m.Cluster == "" || m.SHA256 == "" {
		return m, fmt.Errorf("%s: not a snapshot's record (no name, cluster or sha256)", path)
	}
	return m, nil
}

// List reads the snapshots in dir, oldest first. A .db without its
// .json is listed with Incomplete set.
func List(dir string) ([]Listed, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Listed
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".db")
		if !ok || e.IsDir() {
			continue
		}
		m, err := ReadMeta(filepath.Join(dir, name+".json"))
		if err != nil {
			fi, _ := e.Info()
			m = Meta{Name: name}
			if fi != nil {
				m.Created, m.Size = fi.ModTime(), fi.Size()
			}
			out = append(out, Listed{Meta: m, Incomplete: err.Error()})
			continue
		}
		out = append(out, Listed{Meta: m})
	}
	slices.SortFunc(out, func(a, b Listed) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// Listed is a snapshot as List finds it.
type Listed struct {
	Meta
	// Incomplete says why the .db has no usable record ("" when it has).
	Incomplete string
}

// Prune are the snapshots to delete so that node's schedule keeps its
// newest keep: only node's scheduled ones are counted and pruned (a
// snapshot a user asked for stays until deleted, and servers sharing a
// directory keep their own), and list is oldest first.
func Prune(list []Listed, node string, keep int) []Listed {
	scheduled := ofSchedule(list, node)
	if keep < 1 || len(scheduled) <= keep {
		return nil
	}
	return scheduled[:len(scheduled)-keep]
}

// NextScheduled is when node's schedule takes its next snapshot: every
// after its newest (list is oldest first), or now when it has none or
// is late, so that a server restarted more often than every still takes
// them.
func NextScheduled(list []Listed, node string, every time.Duration, now time.Time) time.Time {
	scheduled := ofSchedule(list, node)
	if len(scheduled) == 0 {
		return now
	}
	next := scheduled[len(scheduled)-1].Created.Add(every)
	if next.Before(now) {
		return now
	}
	return next
}

// ofSchedule are node's complete scheduled snapshots in list.
func ofSchedule(list []Listed, node string) []Listed {
	var out []Listed
	for _, l := range list {
		if l.Scheduled && l.Incomplete == "" && l.Node == node {
			out = append(out, l)
		}
	}
	return out
}

// Delete removes snapshot name (with or without .db) from dir: its .json
// first, so that a half-done delete leaves an incomplete snapshot, never
// a record of a file that is gone.
func Delete(dir, name string) error {
	name = strings.TrimSuffix(filepath.Base(name), ".db")
	m := Meta{Name: name}
	if _, err := os.Stat(m.DB(dir)); err != nil {
		return fmt.Errorf("no snapshot %s in %s", name, dir)
	}
	if err := os.Remove(m.JSON(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.Remove(m.DB(dir))
}

var (
	snapshotsTaken = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steadyplane_etcd_snapshots_total",
		Help: "Scheduled etcd snapshots taken by this server, by result (saved, failed)."}, []string{"result"})
	lastSnapshot = prometheus.NewGauge(prometheus.GaugeOpts{Name: "steadyplane_etcd_snapshot_last_success_timestamp_seconds",
		Help: "When this server last saved a scheduled etcd snapshot (Unix time)."})
	lastSnapshotBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "steadyplane_etcd_snapshot_last_size_bytes",
		Help: "The size of the last scheduled etcd snapshot this server saved."})
)

// Collectors are the schedule's metrics, served by a server's node agent.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{snapshotsTaken, lastSnapshot, lastSnapshotBytes}
}

// Scheduled takes a scheduled snapshot on s and deletes those beyond
// the newest keep, recording the result in the metrics. It returns the
// snapshot and the names it pruned.
func Scheduled(ctx context.Context, s *Server, keep int) (Meta, []string, error) {
	m, err := s.Save(ctx, true)
	if err != nil {
		snapshotsTaken.WithLabelValues("failed").Inc()
		return m, nil, err
	}
	snapshotsTaken.WithLabelValues("saved").Inc()
	lastSnapshot.Set(float64(m.Created.Unix()))
	lastSnapshotBytes.Set(float64(m.Size))
	all, err := List(s.Dir)
	if err != nil {
		return m, nil, err
	}
	var pruned []string
	for _, old := range Prune(all, s.Node, keep) {
		if err := Delete(s.Dir, old.Name); err != nil {
			return m, pruned, err
		}
		pruned = append(pruned, old.Name)
	}
	return m, pruned, nil
}
