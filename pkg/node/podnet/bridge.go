package podnet

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/vishvananda/netlink"
	netutils "k8s.io/utils/net"
)

// Gateway is the pods' gateway in cidr, its first address: the bridge
// plugin (isGateway, host-local's default) puts it on the bridge.
func Gateway(cidr string) (net.IP, error) {
	_, n, err := netutils.ParseCIDRSloppy(cidr)
	if err != nil {
		return nil, fmt.Errorf("pod CIDR %q: %w", cidr, err)
	}
	if ones, bits := n.Mask.Size(); bits-ones < 2 {
		return nil, fmt.Errorf("pod CIDR %s has no room for pods", n)
	}
	return netutils.GetIndexedIP(n, 1)
}

// EnsureBridge makes the pods' bridge before any pod exists, with the
// gateway address of cidr, and sets it up, as the bridge plugin would on
// the first pod: the node's own address then lives on it, reachable from
// the host and from every pod, and on no interface that leads off the
// machine. cidr must overlap no route of the host but the bridge's own.
// It returns the gateway address.
func EnsureBridge(name, cidr string) (net.IP, error) {
	routes, err := HostRoutes()
	if err != nil {
		return nil, err
	}
	if err := CheckFree(cidr, routes, name); err != nil {
		return nil, err
	}
	gw, err := Gateway(cidr)
	if err != nil {
		return nil, err
	}
	_, n, _ := netutils.ParseCIDRSloppy(cidr)
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		attrs := netlink.NewLinkAttrs()
		attrs.Name = name
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil && !errors.Is(err, syscall.EEXIST) {
			return nil, fmt.Errorf("creating bridge %s: %w", name, err)
		}
		if link, err = netlink.LinkByName(name); err != nil {
			return nil, fmt.Errorf("bridge %s: %w", name, err)
		}
	case err != nil:
		return nil, fmt.Errorf("bridge %s: %w", name, err)
	}
	if _, ok := link.(*netlink.Bridge); !ok {
		return nil, fmt.Errorf("%s exists and is a %s, not a bridge; choose another name (--cni-bridge)", name, link.Type())
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: gw, Mask: n.Mask}}
	if err := netlink.AddrReplace(link, addr); err != nil {
		return nil, fmt.Errorf("address %s on bridge %s: %w", addr.IPNet, name, err)
	}
	// A bridge whose MAC was never set takes the lowest of its ports' and
	// changes as pods come and go; the bridge plugin's CHECK compares it
	// with the one it recorded, so a restarted agent would find every
	// running pod's network broken and give the pods new addresses. Set
	// to itself, the address stays (as the plugin does on bridges it
	// gives an address).
	if err := netlink.LinkSetHardwareAddr(link, link.Attrs().HardwareAddr); err != nil {
		return nil, fmt.Errorf("fixing the MAC of bridge %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("setting bridge %s up: %w", name, err)
	}
	return gw, nil
}
