package main

import (
	"context"
	"path/filepath"

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

// withStore runs a subcommand on the store's commands.
func (f *imagesStoreFlags) withStore(run func(c images.Commands, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		s, err := f.open()
		if err != nil {
			return err
		}
		return run(images.Commands{Store: s, RegistriesFile: filepath.Join(f.dataDir, "registries.yaml"), Out: cmd.OutOrStdout(), Err: cmd.ErrOrStderr()}, args)
	}
}

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
		RunE:  f.withStore(func(c images.Commands, args []string) error { return c.Import(args) }),
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "pull REFERENCE",
		Short: "Pull an image from its registry or its mirrors in <data-dir>/registries.yaml (plain HTTP only to loopback registries and http:// mirrors)",
		Args:  cobra.ExactArgs(1),
		RunE:  f.withStore(func(c images.Commands, args []string) error { return c.Pull(context.Background(), args[0]) }),
	})
	cmd.AddCommand(&cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the images in the store",
		Args:    cobra.NoArgs,
		RunE:    f.withStore(func(c images.Commands, _ []string) error { return c.List() }),
	})
	cmd.AddCommand(&cobra.Command{
		Use:     "rm REFERENCE...",
		Aliases: []string{"remove"},
		Short:   "Remove images (a name, a digest or an image ID); layers a running container uses stay until it ends",
		Args:    cobra.MinimumNArgs(1),
		RunE:    f.withStore(func(c images.Commands, args []string) error { return c.Remove(args) }),
	})
	return cmd
}
