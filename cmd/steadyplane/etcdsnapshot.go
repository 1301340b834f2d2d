package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/steadyplane/steadyplane/pkg/etcd/snapshot"
)

func newEtcdSnapshotCommand() *cobra.Command {
	dataDir, dir := ".steadyplane", ""
	cmd := &cobra.Command{
		Use:   "etcd-snapshot",
		Short: "Save, list and delete snapshots of the cluster's etcd data",
		Long: `Snapshots of a server's etcd member: consistent, checked against etcd's own sha256, written
atomically and 0600 to <data-dir>/snapshots with a record of what they are (<name>.json).
up also takes them on a schedule (--etcd-snapshot-interval, 12h; --etcd-snapshot-retention,
5). Any server of a cluster can take one: each holds all of the cluster's data.

To go back to one: stop up, then run it once with --cluster-reset
--cluster-reset-restore-path <the .db file> and its usual flags, then start it as before.
It becomes a cluster of one with the snapshot's data; other servers join it again from clean
data directories.`,
		Example: `  steadyplane etcd-snapshot save
  steadyplane etcd-snapshot list
  steadyplane etcd-snapshot delete on-demand-steadyplane-20261127T120000Z`,
	}
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", dataDir, "Data directory of a server of the cluster (its etcd client certificate is used).")
	cmd.PersistentFlags().StringVar(&dir, "dir", "", "Directory of the snapshots (default <data-dir>/snapshots, as up's --etcd-snapshot-dir).")
	save := &cobra.Command{
		Use:   "save",
		Short: "Take a snapshot now and print its path",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			s, err := snapshot.ForDataDir(dataDir, dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "saving a snapshot of etcd at %s\n", s.Endpoint)
			m, err := s.Save(ctx, false)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "saved %s: revision %d, %d bytes, sha256 %s\n", m.Name, m.Revision, m.Size, m.SHA256)
			path, err := filepath.Abs(m.DB(s.Dir))
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), path)
			return nil
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the snapshots, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := snapshot.ForDataDir(dataDir, dir)
			if err != nil {
				return err
			}
			all, err := snapshot.List(s.Dir)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tCREATED\tNODE\tREVISION\tSIZE\tKIND")
			for _, l := range all {
				kind := "on-demand"
				switch {
				case l.Incomplete != "":
					kind = "incomplete: " + l.Incomplete
				case l.Scheduled:
					kind = "scheduled"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\n", l.Name, l.Created.UTC().Format("2006-01-02T15:04:05Z"), l.Node, l.Revision, l.Size, kind)
			}
			return w.Flush()
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete snapshots by name (as list shows them)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := snapshot.ForDataDir(dataDir, dir)
			if err != nil {
				return err
			}
			var errs []error
			for _, name := range args {
				if err := snapshot.Delete(s.Dir, name); err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "snapshot %s deleted\n", name)
			}
			return errors.Join(errs...)
		},
	}
	cmd.AddCommand(save, list, del)
	return cmd
}
