package controlplane

import (
	"context"
	"net/url"
	"slices"
	"time"

	"github.com/steadyplane/steadyplane/pkg/join"
)

// alternatives are the API servers written into the kubeconfigs'
// steadyplane.io/alternative-services extension: this server first (a
// client prefers its local server), then every other one last seen.
func (cp *ControlPlane) alternatives() []string {
	return join.MergeServers(cp.addr.apiserverHostPort(), cp.state.Servers)
}

// apiserverURLHost is the host:port of an API server's URL.
func apiserverURLHost(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return p.Host
}

// refreshServers records the API servers the cluster lists now and, when
// they changed, writes the admin kubeconfig again with all of them: a
// client that starts while this server is down still finds the others.
// The components' kubeconfigs follow at the next start (running clients
// learn servers from Alt-Svc).
func (cp *ControlPlane) refreshServers(ctx context.Context) error {
	if cp.addr.host() == nil {
		return nil // no other server can join one that is not on a host address
	}
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	servers, err := join.ListServers(ctx, client)
	if err != nil {
		return err
	}
	if len(servers) == 0 || slices.Equal(servers, cp.state.Servers) {
		return nil
	}
	cp.state.Servers = servers
	cp.state.EtcdClientPort = cp.opts.EtcdClientPort
	if err := join.SaveState(string(cp.dir), cp.state); err != nil {
		return err
	}
	cp.progressf("API servers of the cluster: %v (the kubeconfigs list them all)", servers)
	if err := join.PublishServers(ctx, client, cp.pki.CA.CertPEM, cp.APIServerURL(), cp.alternatives()); err != nil {
		return err
	}
	return cp.writeAdminKubeconfig()
}

// followServers refreshes the servers every interval until ctx ends, and
// writes the admin kubeconfig again when its certificate is renewed: the
// one goroutine that writes it while up runs.
func (cp *ControlPlane) followServers(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, interval)
		if err := cp.refreshServers(rctx); err != nil && ctx.Err() == nil {
			cp.progressf("reading the cluster's API servers: %v", err)
		}
		if err := cp.republishIfRotated(rctx); err != nil && ctx.Err() == nil {
			cp.progressf("sealing the join data again: %v", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-cp.adminRenewed:
			if err := cp.writeAdminKubeconfig(); err != nil {
				cp.progressf("writing the admin kubeconfig with its renewed certificate: %v", err)
			}
		}
	}
}
