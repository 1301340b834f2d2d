// Package rules removes the packet-filter rules kube-proxy leaves behind,
// with upstream's own cleanup; it is apart from package kubeproxy so that
// only "steadyplane cleanup" carries upstream's proxiers.
package rules

import (
	"context"
	"errors"

	"k8s.io/kubernetes/pkg/proxy/iptables"
	"k8s.io/kubernetes/pkg/proxy/nftables"
)

// Cleanup removes kube-proxy's nftables and iptables rules with
// upstream's own cleanup (not its IPVS one, which would flush every IPVS
// service of the machine). A stopped kube-proxy leaves them, as upstream's
// does, so that a restarted one takes them over.
func Cleanup(ctx context.Context) error {
	nft := nftables.CleanupLeftovers(ctx)
	ipt := iptables.CleanupLeftovers(ctx)
	if nft || ipt {
		return errors.New("removing kube-proxy's rules failed (see the log above); the next kube-proxy takes them over, or remove them with nft and iptables")
	}
	return nil
}
