// Command steadyplane is a Kubernetes control plane that stays up: the real
// kube-apiserver on an embedded etcd, with steadyplane's availability
// mechanisms. Each subcommand is a thin shell over a package under pkg/.
package main

import (
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/transport"
	"k8s.io/component-base/cli"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/buildinfo"
)

func main() {
	// kube-proxy and CoreDNS build their clients with client-go alone:
	// their kubeconfigs name this provider to fail over between API
	// servers.
	if err := altsvcclient.RegisterAuthProvider(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// A build given a release that is no version would put it into every
	// component's version, which clients parse: refuse it at once.
	if err := buildinfo.CheckRelease(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildinfo.StampComponentVersion()
	// Every component in this binary that names its client certificate's
	// files (its kubeconfig) reads them again this often: a renewal, at
	// two thirds of the certificate's lifetime, must reach it well within
	// the third left, even when a test asks for a lifetime of minutes.
	// It is also the window after a renewal in which upstream client-go
	// may close a connection under its own handshake (docs/certificates.md):
	// short. client-go's default, 5 minutes, is a test hook too; reading
	// and parsing two small files every 2 s costs nothing.
	transport.CertCallbackRefreshDuration = 2 * time.Second
	if isKubectl(os.Args) {
		os.Exit(runKubectl(os.Args))
	}
	buildinfo.RegisterProcessMetrics()
	os.Exit(cli.Run(newRootCommand()))
}
