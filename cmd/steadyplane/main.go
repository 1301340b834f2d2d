// Command steadyplane is a Kubernetes control plane that stays up: the real
// kube-apiserver on an embedded etcd, with steadyplane's availability
// mechanisms. Each subcommand is a thin shell over a package under pkg/.
package main

import (
	"os"

	"k8s.io/component-base/cli"
)

func main() {
	if isKubectl(os.Args) {
		os.Exit(runKubectl(os.Args))
	}
	os.Exit(cli.Run(newRootCommand()))
}
