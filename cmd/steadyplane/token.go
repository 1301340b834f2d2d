package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadyplane/steadyplane/pkg/join"
)

func newTokenCommand() *cobra.Command {
	dataDir := ".steadyplane"
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make, list and revoke the cluster's join tokens",
		Long: `Join tokens let another host join the cluster: a server token (up --server) opens the
cluster's keys, which the servers keep sealed for it; a worker token (node --server)
asks for a new node's certificates and nothing else, and never for a node the cluster
has. The first start of up makes one of each (<data-dir>/token, <data-dir>/node-token),
valid for --token-ttl (24h by default). Run these on any server, with its --data-dir.`,
		Example: `  steadyplane token create --ttl 2h --server
  steadyplane token list
  steadyplane token delete abcdef`,
	}
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", dataDir, "Data directory of a server of the cluster (its admin kubeconfig and CA are used).")

	var ttl time.Duration
	var server bool
	var description string
	create := &cobra.Command{
		Use:   "create",
		Short: "Make a join token and print it",
		Long: `Make a join token and print it, alone on standard output (the progress goes to standard
error). --server makes a server token: the command waits until a running server sealed
the cluster's keys for it (at most a minute).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			client, ca, err := join.TokenClient(dataDir)
			if err != nil {
				return err
			}
			kind := join.WorkerToken
			if server {
				kind = join.ServerToken
			}
			tok, _, err := join.CreateToken(ctx, client, ca, kind, ttl, description)
			if err != nil {
				return err
			}
			if server {
				fmt.Fprintf(cmd.ErrOrStderr(), "token %s: waiting for a server to seal the join data for it\n", tok.ID)
				if err := join.WaitSealed(ctx, client, tok.ID, time.Minute); err != nil {
					if _, derr := join.DeleteToken(ctx, client, tok.ID); derr != nil {
						err = errors.Join(err, derr)
					}
					return err
				}
			}
			expires := "never expires"
			if ttl > 0 {
				expires = "expires " + time.Now().Add(ttl).UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%s token %s, %s (steadyplane token delete %s revokes it)\n", kind, tok.ID, expires, tok.ID)
			fmt.Fprintln(cmd.OutOrStdout(), tok.String())
			return nil
		},
	}
	create.Flags().DurationVar(&ttl, "ttl", join.DefaultTokenTTL, "How long the token is valid; 0 for ever.")
	create.Flags().BoolVar(&server, "server", false, "A server token (joins servers, opens the cluster's keys); a worker token otherwise.")
	create.Flags().StringVar(&description, "description", "", "What the token is for, shown by token list.")

	list := &cobra.Command{
		Use:   "list",
		Short: "List the cluster's bootstrap tokens: ID, kind, expiry, the token, what it is for",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			client, ca, err := join.TokenClient(dataDir)
			if err != nil {
				return err
			}
			tokens, err := join.ListTokens(ctx, client, ca)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tKIND\tEXPIRES\tTOKEN\tDESCRIPTION")
			now := time.Now()
			for _, t := range tokens {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", t.Token.ID, t.Kind, expiry(t, now), t.Token.String(), t.Description)
			}
			return w.Flush()
		},
	}

	del := &cobra.Command{
		Use:   "delete ID...",
		Short: "Revoke join tokens (an ID, or the whole token), with the join data sealed for them",
		Long: `Revoke join tokens: each is refused from now on, also after a restart of any server, and
the cluster's keys sealed for a server token are deleted with it. Hosts that joined
with it keep their own credentials.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			client, _, err := join.TokenClient(dataDir)
			if err != nil {
				return err
			}
			var errs []error
			for _, arg := range args {
				id, err := join.DeleteToken(ctx, client, arg)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "token %s deleted\n", id)
			}
			return errors.Join(errs...)
		},
	}
	cmd.AddCommand(create, list, del)
	return cmd
}

// expiry says when a listed token expires, and how soon.
func expiry(t join.TokenInfo, now time.Time) string {
	switch {
	case t.Expires.IsZero():
		return "never"
	case t.Expired(now):
		return t.Expires.UTC().Format(time.RFC3339) + " (expired)"
	}
	return fmt.Sprintf("%s (in %s)", t.Expires.UTC().Format(time.RFC3339), strings.TrimSuffix(t.Expires.Sub(now).Round(time.Minute).String(), "0s"))
}
