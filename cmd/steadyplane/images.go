package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadyplane/steadyplane/pkg/node/images"
)

// imagesStoreFlags name the image store the images subcommands work on:
// the node's of `up` in --data-dir, or --store.
type imagesStoreFlags struct {
	dataDir, store string
}

func (f *imagesStoreFlags) add(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.dataDir, "data-dir", ".steadyplane", "Data directory of `steadyplane up`; its node's image store is <data-dir>/node/image-store.")
	cmd.PersistentFlags().StringVar(&f.store, "store", "", "Image store directory (overrides --data-dir), e.g. a node agent's <root-dir>/image-store.")
}

func (f *imagesStoreFlags) open() (*images.Store, error) {
	dir := f.store
	if dir == "" {
		dir = images.StoreDir(filepath.Join(f.dataDir, "node"))
	}
	return images.Open(dir)
}

// withStore opens the store for a subcommand's run.
func (f *imagesStoreFlags) withStore(run func(cmd *cobra.Command, args []string, s *images.Store) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		s, err := f.open()
		if err != nil {
			return err
		}
		return run(cmd, args, s)
	}
}

func unpackOptions() images.UnpackOptions { return images.UnpackOptions{Rootless: os.Geteuid() != 0} }

func newImagesCommand() *cobra.Command {
	var f imagesStoreFlags
	cmd := &cobra.Command{
		Use:   "images",
		Short: "List, import, pull and remove the node's container images",
		Long: `Manage the image store of a steadyplane node: the images its pods run from.

Pods pull their images by themselves (imagePullPolicy, imagePullSecrets); these commands
are for machines without a registry: import 'docker save' or OCI archives (gzip or not),
or drop them into <data-dir>/images/, which 'up' imports at every start.`,
		Example: `  steadyplane images import app.tar
  steadyplane images list
  steadyplane images pull 127.0.0.1:5000/app:v1
  steadyplane images rm app:v1`,
	}
	f.add(cmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "import ARCHIVE...",
		Short: "Import images from docker-save or OCI archives",
		Args:  cobra.MinimumNArgs(1),
		RunE: f.withStore(func(cmd *cobra.Command, args []string, s *images.Store) error {
			for _, a := range args {
				start := time.Now()
				fmt.Fprintf(cmd.ErrOrStderr(), "importing %s ...\n", a)
				imgs, err := s.Import(a, unpackOptions())
				if err != nil {
					return err
				}
				for _, img := range imgs {
					fmt.Fprintf(cmd.OutOrStdout(), "imported %s %s (%s)\n", shortID(img.ID), strings.Join(img.Names, ", "), time.Since(start).Round(time.Millisecond))
				}
			}
			return nil
		}),
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "pull REFERENCE",
		Short: "Pull an image from its registry or its mirrors in <data-dir>/registries.yaml (plain HTTP only to loopback registries and http:// mirrors)",
		Args:  cobra.ExactArgs(1),
		RunE: f.withStore(func(cmd *cobra.Command, args []string, s *images.Store) error {
			fmt.Fprintf(cmd.ErrOrStderr(), "pulling %s ...\n", args[0])
			regs, err := images.LoadRegistries(filepath.Join(f.dataDir, "registries.yaml"))
			if err != nil {
				return err
			}
			p := &images.Puller{Store: s, Registries: regs, Unpack: unpackOptions()}
			img, err := p.Pull(context.Background(), args[0], nil)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pulled %s %s\n", shortID(img.ID), strings.Join(img.RepoDigests, ", "))
			return nil
		}),
	})
	cmd.AddCommand(&cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the images in the store",
		Args:    cobra.NoArgs,
		RunE: f.withStore(func(cmd *cobra.Command, _ []string, s *images.Store) error {
			imgs, err := s.List()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
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
		}),
	})
	cmd.AddCommand(&cobra.Command{
		Use:     "rm REFERENCE...",
		Aliases: []string{"remove"},
		Short:   "Remove images (a name, a digest or an image ID); layers a running container uses stay until it ends",
		Args:    cobra.MinimumNArgs(1),
		RunE: f.withStore(func(cmd *cobra.Command, args []string, s *images.Store) error {
			for _, a := range args {
				img, err := s.Remove(a)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s (%s)\n", a, shortID(img.ID))
			}
			return nil
		}),
	})
	return cmd
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
