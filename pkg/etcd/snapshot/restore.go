package snapshot

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.uber.org/zap"
)

// Prepare makes, beside the etcd data directory dataDir, the data
// directory of a member that starts as a new cluster of one from the
// snapshot at path (checked by Verify first), and returns it: the
// snapshot's keys at their revisions, no member of the cluster it was
// taken in, and no raft index, so that the member's first entries (its
// own membership) apply. Swap puts it in place. Nothing else is
// touched: on an error, dataDir is as it was.
//
// It is what etcdutl's snapshot restore does with the same storage
// packages, which steadyplane cannot import (the module is not served
// here); the member writes its own WAL when it first starts.
func Prepare(path, dataDir string) (string, error) {
	staging := dataDir + ".restoring"
	if err := os.RemoveAll(staging); err != nil {
		return "", err
	}
	snapDir := filepath.Join(staging, "member", "snap")
	if err := os.MkdirAll(snapDir, 0o700); err != nil {
		return "", err
	}
	if err := copyDB(path, filepath.Join(snapDir, "db")); err != nil {
		_ = os.RemoveAll(staging)
		return "", err
	}
	if err := forget(filepath.Join(snapDir, "db")); err != nil {
		_ = os.RemoveAll(staging)
		return "", fmt.Errorf("preparing the snapshot's data: %w", err)
	}
	return staging, nil
}

// copyDB copies the snapshot's database, without etcd's sha256 trailer,
// to dst (0600, synced).
func copyDB(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, io.LimitReader(in, fi.Size()-sha256.Size)); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// RevisionBump is how far a restore moves etcd's revision past the
// snapshot's: further than the cluster can have written since, so that
// resourceVersions never go back. Clients that watched from a revision
// of before the restore are told it is compacted (410 Gone) and list
// again, instead of missing what came between (etcdutl's
// --bump-revision with --mark-compacted, as Kubernetes' documentation
// asks of a restore).
const RevisionBump = 1_000_000_000

// forget removes from the database at db what ties it to the cluster and
// the raft log it was taken from: the members, and the raft index and
// term the data was applied to; and moves its revision RevisionBump on,
// compacted there.
func forget(db string) (err error) {
	lg := zap.NewNop()
	be := backend.NewDefaultBackend(lg, db)
	defer func() {
		if cerr := be.Close(); err == nil {
			err = cerr
		}
	}()
	if err := schema.NewMembershipBackend(lg, be).TrimMembershipFromBackend(); err != nil {
		return err
	}
	tx := be.BatchTx()
	tx.LockOutsideApply()
	schema.UnsafeCreateMetaBucket(tx)
	for _, key := range [][]byte{schema.MetaConsistentIndexKeyName, schema.MetaTermKeyName, schema.MetaConfStateName} {
		tx.UnsafeDelete(schema.Meta, key)
	}
	var latest int64
	err = tx.UnsafeForEach(schema.Key, func(k, _ []byte) error {
		latest = max(latest, mvcc.BytesToRev(k).Main)
		return nil
	})
	if err != nil {
		tx.Unlock()
		return err
	}
	// An empty entry at the new revision makes it the store's latest; the
	// compaction marks make every earlier one answer "compacted".
	latest += RevisionBump
	tx.UnsafePut(schema.Key, mvcc.RevToBytes(mvcc.Revision{Main: latest}, mvcc.NewRevBytes()), []byte{})
	mvcc.UnsafeSetScheduledCompact(tx, latest)
	mvcc.UnsafeSetFinishedCompact(tx, latest)
	tx.Unlock()
	be.ForceCommit()
	return nil
}

// Swap puts the prepared directory staging in place of dataDir, whose
// data is kept as dataDir.before-restore-<suffix> and returned.
func Swap(staging, dataDir, suffix string) (string, error) {
	kept := dataDir + ".before-restore-" + suffix
	if _, err := os.Stat(dataDir); err == nil {
		if err := os.Rename(dataDir, kept); err != nil {
			return "", err
		}
	} else {
		kept = ""
	}
	if err := os.Rename(staging, dataDir); err != nil {
		if kept != "" {
			_ = os.Rename(kept, dataDir)
		}
		return "", err
	}
	return kept, nil
}

// Unswap puts the data kept by Swap back in place of dataDir (a restore
// whose member did not start), keeping the failed one as
// dataDir.restore-failed; with nothing kept (there was no data), only
// the failed one moves aside.
func Unswap(dataDir, kept string) error {
	failed := dataDir + ".restore-failed"
	_ = os.RemoveAll(failed)
	if err := os.Rename(dataDir, failed); err != nil && !os.IsNotExist(err) {
		return err
	}
	if kept == "" {
		return nil
	}
	return os.Rename(kept, dataDir)
}
