package images

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
)

// Add puts img into the store under names (normalized references) and
// repoDigests, unpacking each layer the store does not have yet; a name
// another image had moves to this one, as a tag does. Every layer is checked
// against its diff ID and the configuration against the image ID.
func (s *Store) Add(img v1.Image, names, repoDigests []string, o UnpackOptions) (Image, error) {
	id, err := img.ConfigName()
	if err != nil {
		return Image{}, fmt.Errorf("image configuration: %w", err)
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return Image{}, fmt.Errorf("image configuration: %w", err)
	}
	if sum := sha256.Sum256(raw); id.Algorithm != "sha256" || hex.EncodeToString(sum[:]) != id.Hex {
		return Image{}, fmt.Errorf("image configuration does not match its digest %s", id)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Image{}, fmt.Errorf("image configuration: %w", err)
	}
	if cf.OS != "" && cf.OS != "linux" {
		return Image{}, fmt.Errorf("image %s is for %s, not linux", id, cf.OS)
	}
	layers, err := img.Layers()
	if err != nil {
		return Image{}, fmt.Errorf("image layers: %w", err)
	}
	// The layers unpacked so far belong to no image until register: a
	// lease on them for the pull keeps a Prune (an image removed, the
	// garbage collector) from deleting them under it.
	pull := fmt.Sprintf("pull-%s-%d", id.Hex[:12], s.now().UnixNano())
	held := Image{ID: id.String()}
	for _, d := range cf.RootFS.DiffIDs {
		held.Layers = append(held.Layers, d.String())
	}
	if err := s.Lease(pull, held); err != nil {
		return Image{}, err
	}
	defer func() { _ = s.Release(pull) }()
	var diffIDs []v1.Hash
	var size int64
	for i, l := range layers {
		diffID, err := l.DiffID()
		if err != nil {
			return Image{}, fmt.Errorf("layer %d: %w", i, err)
		}
		if i < len(cf.RootFS.DiffIDs) && cf.RootFS.DiffIDs[i] != diffID {
			return Image{}, fmt.Errorf("layer %d is %s, the configuration says %s", i, diffID, cf.RootFS.DiffIDs[i])
		}
		if err := s.unpackLayer(l.Uncompressed, diffID, o); err != nil {
			return Image{}, fmt.Errorf("layer %d (%s): %w", i, diffID, err)
		}
		if n, err := l.Size(); err == nil {
			size += n
		}
		diffIDs = append(diffIDs, diffID)
	}
	return s.register(raw, diffIDs, size, names, repoDigests)
}

// register records the image of configuration raw, whose layers (diffIDs,
// size bytes in all) are unpacked in the store, under names and
// repoDigests; a name another image had moves to this one, as a tag does.
func (s *Store) register(raw []byte, diffIDs []v1.Hash, size int64, names, repoDigests []string) (Image, error) {
	sum := sha256.Sum256(raw)
	id := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	rec := Image{ID: id.String(), Names: names, RepoDigests: repoDigests, Created: s.now().UTC(), Size: size}
	for _, d := range diffIDs {
		rec.Layers = append(rec.Layers, d.String())
	}
	if err := atomicfile.WriteFile(s.configPath(id), raw, 0o600); err != nil {
		return Image{}, err
	}
	var stored Image
	err := s.update(func(idx *index) error {
		for i := range idx.Images {
			other := &idx.Images[i]
			if other.ID == rec.ID {
				continue
			}
			other.Names = slices.DeleteFunc(other.Names, func(n string) bool { return slices.Contains(names, n) })
		}
		for i := range idx.Images {
			if idx.Images[i].ID == rec.ID {
				have := &idx.Images[i]
				have.Names = union(have.Names, names)
				have.RepoDigests = union(have.RepoDigests, repoDigests)
				stored = *have
				return nil
			}
		}
		idx.Images = append(idx.Images, rec)
		stored = rec
		return nil
	})
	return stored, err
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// unpackLayer unpacks the layer open reads (uncompressed) into the layer
// directory of diffID unless it is there: into a temporary directory first,
// renamed once complete, so a layer directory is never half written.
func (s *Store) unpackLayer(open func() (io.ReadCloser, error), diffID v1.Hash, o UnpackOptions) error {
	dst := s.layerPath(diffID)
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.root, "tmp"), diffID.Hex[:12]+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	rc, err := open()
	if err != nil {
		return err
	}
	defer rc.Close()
	h := sha256.New()
	tee := io.TeeReader(rc, h)
	if _, err := Unpack(tmp, tee, o); err != nil {
		return err
	}
	// The tar's end may leave padding unread; reading to the end also
	// lets the registry client check the compressed digest.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return err
	}
	if err := rc.Close(); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); diffID.Algorithm != "sha256" || got != diffID.Hex {
		return fmt.Errorf("content is sha256:%s, not its diff ID", got)
	}
	if err := os.Rename(tmp, dst); err != nil {
		if _, statErr := os.Stat(dst); statErr == nil {
			return nil // unpacked meanwhile by another pull
		}
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(dst))
}
