// Package installer puts a revision of a static pod onto a node: its
// manifest and files under the resources directory, then the startup
// monitor's manifest, then the operand's, all under the installer lock, so
// that a startup monitor falling back never interleaves with it. It prunes
// old revisions on the way out.
package installer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/fallback/pruner"
	"github.com/steadyplane/steadyplane/pkg/fallback/revisions"
)

// Revision is what one revision puts on a node.
type Revision struct {
	// Number is the revision, from 1.
	Number int
	// Operand is the operand's pod manifest.
	Operand []byte
	// Monitor is the startup monitor's manifest; nil installs none (the
	// fallback is off, or bootstrap, where there is nothing to fall back to).
	Monitor []byte
	// ConfigMaps and Secrets are the user's files: name, key, content.
	ConfigMaps, Secrets map[string]map[string][]byte
}

// Options tune pruning.
type Options struct {
	// Keep is how many revisions stay on the node besides the protected
	// ones (pruner.Protected); 0 prunes nothing.
	Keep int
	// LastFailed is the newest revision that failed on this node, whose
	// files are kept as the evidence; 0 for none.
	LastFailed int
	// Log gets what was written and pruned; nil for none.
	Log *slog.Logger
}

// Install writes r into l: the revision directory (made whole in a
// temporary directory and renamed into place, so that it is complete or
// absent), the monitor's manifest, then the operand's, each atomically.
// A revision directory that exists already is kept: revisions do not change,
// and a running operand may be reading it (an installer that is run again
// after it died).
func Install(ctx context.Context, l revisions.Layout, r Revision, o Options) (pruned []int, err error) {
	if r.Number < 1 {
		return nil, fmt.Errorf("revision %d: revisions are numbered from 1", r.Number)
	}
	if _, err := revisions.DecodeManifest(r.Operand); err != nil {
		// Written anyway: the startup monitor reports it (NeverStartedUp)
		// and falls back, which is what the user must see.
		logf(o.Log, "the operand manifest does not parse; installing it for the startup monitor to report", "revision", r.Number, "error", err)
	}
	unlock, err := l.Lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	current := l.InstalledRevision()
	if err := writeRevisionDir(l, r); err != nil {
		return nil, fmt.Errorf("revision %d: %w", r.Number, err)
	}
	if err := os.MkdirAll(l.ManifestsDir, 0o700); err != nil {
		return nil, err
	}
	if r.Monitor != nil {
		if err := atomicfile.WriteFile(l.MonitorManifest(), r.Monitor, 0o600); err != nil {
			return nil, err
		}
	} else if err := os.Remove(l.MonitorManifest()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := atomicfile.WriteFile(l.OperandManifest(), r.Operand, 0o600); err != nil {
		return nil, err
	}
	logf(o.Log, "installed", "revision", r.Number, "replacing", current, "startupMonitor", r.Monitor != nil)
	if o.Keep < 1 {
		return nil, nil
	}
	return prune(l, o, pruner.Protected{Current: current, Target: r.Number, LastFailed: o.LastFailed})
}

func prune(l revisions.Layout, o Options, p pruner.Protected) ([]int, error) {
	all, err := l.Revisions()
	if err != nil {
		return nil, err
	}
	if p.LastKnownGood, err = l.LastKnownGood(); err != nil {
		return nil, err
	}
	_, pruned := pruner.Split(all, o.Keep, p)
	for _, n := range pruned {
		if err := os.RemoveAll(l.RevisionDir(n)); err != nil {
			return nil, err
		}
		logf(o.Log, "pruned", "revision", n)
	}
	return pruned, nil
}

// writeRevisionDir makes the revision's directory: its manifest (0600),
// configmaps/<name>/<key> (0644) and secrets/<name>/<key> (0600).
func writeRevisionDir(l revisions.Layout, r Revision) error {
	dir := l.RevisionDir(r.Number)
	if have, err := os.ReadFile(l.RevisionManifest(r.Number)); err == nil {
		if !bytes.Equal(have, r.Operand) {
			return fmt.Errorf("%s exists with another manifest; a revision never changes", dir)
		}
		return nil
	}
	if err := os.MkdirAll(l.ResourcesDir, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(l.ResourcesDir, ".installing-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(tmp, filepath.Base(l.RevisionManifest(r.Number))), r.Operand, 0o600); err != nil {
		return err
	}
	for _, set := range []struct {
		dir   string
		files map[string]map[string][]byte
		mode  os.FileMode
	}{{"configmaps", r.ConfigMaps, 0o644}, {"secrets", r.Secrets, 0o600}} {
		for name, keys := range set.files {
			if !safeName(name) {
				return fmt.Errorf("%s name %q cannot be a directory name", set.dir, name)
			}
			d := filepath.Join(tmp, set.dir, name)
			dirMode := os.FileMode(0o755)
			if set.mode == 0o600 {
				dirMode = 0o700
			}
			if err := os.MkdirAll(d, dirMode); err != nil {
				return err
			}
			for key, data := range keys {
				if !safeName(key) {
					return fmt.Errorf("%s/%s: key %q cannot be a file name", set.dir, name, key)
				}
				if err := atomicfile.WriteFile(filepath.Join(d, key), data, set.mode); err != nil {
					return err
				}
			}
		}
	}
	_ = os.RemoveAll(dir) // a directory without its manifest is a torn earlier attempt
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	return atomicfile.SyncDir(l.ResourcesDir)
}

// safeName refuses names that would leave their directory.
func safeName(s string) bool {
	return s != "" && s != "." && s != ".." && filepath.Base(s) == s
}

func logf(l *slog.Logger, msg string, args ...any) {
	if l != nil {
		l.Info(msg, args...)
	}
}

// Restore puts revision n's manifest back as the operand, without a startup
// monitor (n ran ready before), under the lock: how "steadyplane up" starts
// the API server again on the revision it last ran well.
func Restore(ctx context.Context, l revisions.Layout, n int) error {
	data, err := os.ReadFile(l.RevisionManifest(n))
	if err != nil {
		return err
	}
	unlock, err := l.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.MkdirAll(l.ManifestsDir, 0o700); err != nil {
		return err
	}
	if err := os.Remove(l.MonitorManifest()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return atomicfile.WriteFile(l.OperandManifest(), data, 0o600)
}
