package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/steadyplane/steadyplane/pkg/buildinfo"
)

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print steadyplane's release, commit and Kubernetes version",
		Long: `Print which release of steadyplane this binary is (set when it is built with
-ldflags "-X github.com/steadyplane/steadyplane/pkg/buildinfo.Release=v0.N.M"; a build
without it is v0.0.0-dev), the commit it was built from, the Kubernetes version of
its components, and the version they report (kubectl get nodes shows it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := buildinfo.Get()
			switch output {
			case "":
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "Release:     %s\nCommit:      %s\nKubernetes:  %s\nGitVersion:  %s\nGo:          %s %s\n",
					info.Release, info.Commit, info.Kubernetes, info.GitVersion, info.Go, info.Platform)
				return nil
			case "json":
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			return fmt.Errorf("--output %q: want json or nothing", output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: json, or empty for lines.")
	return cmd
}
