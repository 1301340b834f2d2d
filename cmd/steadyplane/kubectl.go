package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/plugin"
	"k8s.io/kubectl/pkg/cmd/util"

	// Client auth plugins, as upstream kubectl has them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
)

// kubectlName is the command that runs kubectl, as a subcommand and as the
// name of a link to the binary.
const kubectlName = "kubectl"

// isKubectl reports whether args (os.Args) ask for kubectl: "steadyplane
// kubectl ..." or the binary started through a link named kubectl.
func isKubectl(args []string) bool {
	if len(args) == 0 {
		return false
	}
	return filepath.Base(args[0]) == kubectlName || len(args) > 1 && args[1] == kubectlName
}

// runKubectl runs upstream kubectl, every subcommand and flag unchanged,
// with steadyplane's client options on every config it builds. args are
// os.Args.
func runKubectl(args []string) int {
	if filepath.Base(args[0]) != kubectlName {
		args = args[1:] // "steadyplane kubectl ...": kubectl sees "kubectl ..."
	}
	// As upstream's main: verbosity first, so that building the command logs.
	_, _ = logs.GlogSetter(kubectlcmd.GetLogVerbosity(args))
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	flags := genericclioptions.NewConfigFlags(true).WithDeprecatedPasswordFlag().WithDiscoveryBurst(300).WithDiscoveryQPS(50.0).WithWarningPrinter(streams)
	flags.WithWrapConfigFn(haWrapper(flags, streams))
	command := kubectlcmd.NewDefaultKubectlCommandWithArgs(kubectlcmd.KubectlOptions{
		PluginHandler: kubectlcmd.NewDefaultPluginHandler(plugin.ValidPluginFilenamePrefixes),
		Arguments:     args,
		ConfigFlags:   flags,
		IOStreams:     streams,
	})
	command.SetArgs(args[1:])
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
	return 0
}

// haWrapper turns both client options on for every config kubectl builds.
// All of them share one registry, so what one request learns (a server
// down, the others' addresses) serves the next. A config the options cannot
// take (one that skips TLS verification) works as in upstream kubectl, with
// one warning saying that it will not fail over.
func haWrapper(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) func(*rest.Config) *rest.Config {
	reg := altsvcclient.NewRegistry(altsvcclient.Options{CacheDir: clientconfig.DefaultCacheDir()})
	var warn sync.Once
	return func(cfg *rest.Config) *rest.Config {
		raw, err := flags.ToRawKubeConfigLoader().RawConfig()
		if err == nil {
			_, err = clientconfig.Apply(cfg, &raw, reg, nil)
		}
		if err != nil {
			warn.Do(func() {
				fmt.Fprintf(streams.ErrOut, "Warning: steadyplane: no failover between API servers: %v\n", err)
			})
		}
		return cfg
	}
}

// newKubectlCommand lists kubectl in "steadyplane --help"; main runs it
// before cobra parses anything, since kubectl parses its own flags.
func newKubectlCommand() *cobra.Command {
	return &cobra.Command{
		Use:   kubectlName + " [command] [flags]",
		Short: "Run kubectl (every upstream command and flag) with client-side HA across API servers",
		Long: `Run the upstream kubectl, from k8s.io/kubectl, with steadyplane's client options on
every request: it fails over between API servers (KEP-3037), starting from the
kubeconfig's steadyplane.io/alternative-services extension and learning the rest from
the servers, and it waits out a server that is still initializing (KEP-3028). Learned
servers are kept in $KUBECACHEDIR or ~/.kube/cache, under alternative-services/.

A link to the binary named kubectl behaves the same:

  ln -s "$(command -v steadyplane)" ~/bin/kubectl`,
		Example:            `  steadyplane kubectl --kubeconfig .steadyplane/admin.kubeconfig get pods -w`,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			os.Exit(runKubectl(os.Args))
			return nil
		},
	}
}
