package controlplane

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/steadyplane/steadyplane/pkg/clusterdns"
	"github.com/steadyplane/steadyplane/pkg/node/images"
)

// dnsComponent is the cluster's DNS: a Deployment, not a static pod.
const dnsComponent = "coredns"

// systemdResolvConf is systemd-resolved's list of the real upstream
// servers, which the kubelet is pointed at where /etc/resolv.conf names
// only its 127.0.0.53 stub.
const systemdResolvConf = "/run/systemd/resolve/resolv.conf"

// NodeResolvConf chooses the node's resolver file, which pods with
// dnsPolicy Default (CoreDNS among them) get: the one given, else
// /etc/resolv.conf unless it names only a loopback stub and systemd-resolved's
// file exists (what kubeadm does for the kubelet).
func NodeResolvConf(given string, etc []byte, systemdExists bool) string {
	if given != "" {
		return given
	}
	if !clusterdns.HasNameserver(etc) && systemdExists {
		return systemdResolvConf
	}
	return "/etc/resolv.conf"
}

// prepareDNS decides the cluster's DNS: its Service address and domain
// for the node agent, the node's resolver file, and the image CoreDNS runs
// from (this binary, written where the node agent imports images at
// start). Without the pieces it needs (a pod network, kube-proxy, the
// controllers) it says so and leaves DNS out.
func (cp *ControlPlane) prepareDNS() error {
	switch {
	case cp.Node == nil || cp.nodeRuntime != "runc":
		cp.progressf("WARNING: no cluster DNS: it runs as a pod on the pod network, which needs the runc runtime")
		return nil
	case cp.Proxy == nil:
		cp.progressf("WARNING: no cluster DNS: its Service needs kube-proxy")
		return nil
	case cp.ControllerManager == nil:
		cp.progressf("WARNING: no cluster DNS: its Deployment needs the controllers")
		return nil
	case cp.advertise.IsLoopback() || cp.advertise.IsUnspecified():
		cp.progressf("WARNING: no cluster DNS: the API server publishes no address pods reach (%s); give --advertise-address", cp.advertise)
		return nil
	}
	ip, err := clusterdns.ServiceIP(cp.opts.ServiceCIDR)
	if err != nil {
		return err
	}
	etc, _ := os.ReadFile("/etc/resolv.conf")
	_, err = os.Stat(systemdResolvConf)
	resolv := NodeResolvConf(cp.opts.ResolvConf, etc, err == nil)
	upstream, err := os.ReadFile(resolv)
	if err != nil && cp.opts.ResolvConf != "" {
		return fmt.Errorf("--resolv-conf=%s: %w", resolv, err)
	}
	forward := clusterdns.HasNameserver(upstream)
	if !forward {
		cp.progressf("cluster DNS: %s names no nameserver pods can reach; names outside %s will not resolve", resolv, cp.opts.ClusterDomain)
	}
	bin, err := InstallBinary(cp.opts.Binary, filepath.Join(cp.dataDir, "bin"))
	if err != nil {
		return fmt.Errorf("installing the binary for the DNS image: %w", err)
	}
	cp.bin = bin // the static pods run the same copy
	ref, _, err := DNSImage(bin, filepath.Join(cp.dataDir, "images"), cp.progressf)
	if err != nil {
		return err
	}
	// CoreDNS reaches the API server at the address it publishes, failing
	// over between every server listed (one, until more join), not
	// through the kubernetes Service (kube-proxy's rules).
	server := net.JoinHostPort(cp.advertise.String(), strconv.Itoa(cp.opts.APIServerPort))
	cp.dns = &clusterdns.Config{Domain: cp.opts.ClusterDomain, ServiceIP: ip.String(), Image: ref, Forward: forward,
		APIServer: "https://" + server, Alternatives: []string{server}}
	cp.Node.Args = append(cp.Node.Args, "--cluster-dns="+ip.String(), "--resolv-conf="+resolv)
	return nil
}

// DNSImage writes the image CoreDNS runs from into importDir, where the
// node agent imports images at start: binary (InstallBinary's copy) as
// steadyplane.io/steadyplane:<its hash>, so that every node of one
// steadyplane release has the image the Deployment names. An archive
// written before is kept, and those of earlier binaries removed (they
// would be imported at every start).
func DNSImage(binary, importDir string, progressf func(string, ...any)) (ref, archive string, err error) {
	ref = DNSImageRef(binary)
	archive = filepath.Join(importDir, "steadyplane-"+strings.TrimPrefix(filepath.Base(binary), "steadyplane-")+".tar")
	if _, err := os.Stat(archive); err != nil {
		start := time.Now()
		progressf("cluster DNS: writing the image %s (this binary) into %s", ref, importDir)
		if err := images.WriteExecutableArchive(binary, DNSImageBinary, ref, archive); err != nil {
			return "", "", fmt.Errorf("the DNS image: %w", err)
		}
		progressf("cluster DNS: image written in %.1fs", time.Since(start).Seconds())
	}
	old, _ := filepath.Glob(filepath.Join(importDir, "steadyplane-*.tar"))
	for _, o := range old {
		if o != archive {
			_ = os.Remove(o)
		}
	}
	return ref, archive, nil
}

// DNSImageBinary is where the DNS image holds the binary.
const DNSImageBinary = "/usr/local/bin/steadyplane"

// DNSImageRef names the image of binary (InstallBinary's copy) that
// CoreDNS runs from: steadyplane.io/steadyplane:<its hash>.
func DNSImageRef(binary string) string {
	return "steadyplane.io/steadyplane:" + strings.TrimPrefix(filepath.Base(binary), "steadyplane-")
}

// applyDNS writes the DNS's objects into the API.
func (cp *ControlPlane) applyDNS(ctx context.Context) error {
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	// The API servers that serve now (what this server saved may hold
	// servers gone since, a cluster reset's among them), in one order:
	// servers of one release that see the same list write the same
	// Deployment.
	alts := cp.alternatives()
	if live, err := listServers(ctx, client); err == nil && len(live) > 0 && len(alts) > 0 {
		alts = MergeServers(alts[0], live) // a joining server may not be listed yet
	}
	if len(alts) > 1 {
		slices.Sort(alts)
		cp.dns.APIServer, cp.dns.Alternatives = "https://"+alts[0], alts
	}
	cp.progressf("starting cluster DNS (CoreDNS, Deployment %s/%s, Service %s %s)", clusterdns.Namespace, clusterdns.Name, clusterdns.ServiceName, cp.dns.ServiceIP)
	objs, err := clusterdns.Objects(*cp.dns)
	if err != nil {
		return err
	}
	return clusterdns.Apply(ctx, client, objs)
}

// WaitDNSReady waits until CoreDNS serves behind the kube-dns Service.
func (cp *ControlPlane) WaitDNSReady(ctx context.Context) error {
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	return poll(ctx, cp.launcher.Runner(nodeComponent), cp.opts.ReadyTimeout, 250*time.Millisecond, func(ctx context.Context) (bool, string) {
		return clusterdns.Ready(ctx, client)
	})
}
