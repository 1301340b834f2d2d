package images

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// Commands are "steadyplane images": the store's images for a person at a
// terminal, on machines without a registry.
type Commands struct {
	Store *Store
	// RegistriesFile is the node's registries file, for Pull.
	RegistriesFile string
	// Out gets the results, Err the progress.
	Out, Err io.Writer
}

// unpackOptions are what this process may do when it unpacks.
func unpackOptions() UnpackOptions { return UnpackOptions{Rootless: os.Geteuid() != 0} }

// Import imports the images of docker-save or OCI archives.
func (c Commands) Import(archives []string) error {
	for _, a := range archives {
		start := time.Now()
		fmt.Fprintf(c.Err, "importing %s ...\n", a)
		imgs, err := c.Store.Import(a, unpackOptions())
		if err != nil {
			return err
		}
		for _, img := range imgs {
			fmt.Fprintf(c.Out, "imported %s %s (%s)\n", shortID(img.ID), strings.Join(img.Names, ", "), time.Since(start).Round(time.Millisecond))
		}
	}
	return nil
}

// Pull pulls ref from its registry or its mirrors.
func (c Commands) Pull(ctx context.Context, ref string) error {
	fmt.Fprintf(c.Err, "pulling %s ...\n", ref)
	regs, err := LoadRegistries(c.RegistriesFile)
	if err != nil {
		return err
	}
	p := &Puller{Store: c.Store, Registries: regs, Unpack: unpackOptions()}
	img, err := p.Pull(ctx, ref, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Out, "pulled %s %s\n", shortID(img.ID), strings.Join(img.RepoDigests, ", "))
	return nil
}

// List prints the store's images, a line per name.
func (c Commands) List() error {
	imgs, err := c.Store.List()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tID\tSIZE\tLAST USED")
	for _, img := range imgs {
		names := img.Names
		if len(names) == 0 {
			names = img.RepoDigests
		}
		if len(names) == 0 {
			names = []string{"<none>"}
		}
		used := "never"
		if !img.LastUsed.IsZero() {
			used = img.LastUsed.Local().Format(time.DateTime)
		}
		for _, n := range names {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n, shortID(img.ID), humanBytes(img.Size), used)
		}
	}
	return tw.Flush()
}

// Remove removes images by name, digest or ID.
func (c Commands) Remove(refs []string) error {
	for _, a := range refs {
		img, err := c.Store.Remove(a)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.Out, "removed %s (%s)\n", a, shortID(img.ID))
	}
	return nil
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}
