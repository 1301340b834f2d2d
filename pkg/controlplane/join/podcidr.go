package join

import (
	"fmt"
	"math/big"
	"net"

	netutils "k8s.io/utils/net"
)

// ChoosePodCIDR is the pod range of the node self: the one it already has
// (assigned[self]), or else the first range of maskSize bits in
// clusterCIDR that no node has. assigned maps node names to their
// spec.podCIDR.
func ChoosePodCIDR(clusterCIDR string, maskSize int, assigned map[string]string, self string) (string, error) {
	if c := assigned[self]; c != "" {
		return c, nil
	}
	_, cluster, err := netutils.ParseCIDRSloppy(clusterCIDR)
	if err != nil {
		return "", fmt.Errorf("cluster CIDR %q: %w", clusterCIDR, err)
	}
	ones, bits := cluster.Mask.Size()
	if maskSize < ones || maskSize > bits {
		return "", fmt.Errorf("node mask /%d does not fit in %s", maskSize, clusterCIDR)
	}
	used := map[string]bool{}
	for _, c := range assigned {
		if _, n, err := netutils.ParseCIDRSloppy(c); err == nil {
			used[n.String()] = true
		}
	}
	count := new(big.Int).Lsh(big.NewInt(1), uint(maskSize-ones))
	base := new(big.Int).SetBytes(cluster.IP.To16())
	if cluster.IP.To4() != nil {
		base.SetBytes(cluster.IP.To4())
	}
	step := new(big.Int).Lsh(big.NewInt(1), uint(bits-maskSize))
	for i := big.NewInt(0); i.Cmp(count) < 0 && i.Cmp(big.NewInt(1<<16)) < 0; i.Add(i, big.NewInt(1)) {
		ip := new(big.Int).Add(base, new(big.Int).Mul(i, step)).FillBytes(make([]byte, bits/8))
		n := &net.IPNet{IP: net.IP(ip), Mask: net.CIDRMask(maskSize, bits)}
		if !used[n.String()] {
			return n.String(), nil
		}
	}
	return "", fmt.Errorf("no free /%d left in %s for node %s", maskSize, clusterCIDR, self)
}
