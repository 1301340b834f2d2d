package controlplane

import (
	"net"
	"strconv"

	netutils "k8s.io/utils/net"
)

// addresses are where a server's components listen and are reached,
// decided once its advertised address is known (preparePKI).
type addresses struct {
	// bind is the API server's --bind-address; advertise the address it
	// publishes; bridge the address up put on the pod bridge for the
	// cluster (OwnsNodeAddress), nil when it uses one named.
	bind      string
	advertise net.IP
	bridge    net.IP
	// nodeIP is --node-ip as given ("" for the advertised address).
	nodeIP string
	// The ports of the API server, etcd and the readiness-gate webhook.
	apiserverPort, etcdClientPort, etcdPeerPort, webhookPort int
}

// apiserverURL is where clients reach the API server.
func (a addresses) apiserverURL() string {
	host := a.bind
	if ip := netutils.ParseIPSloppy(host); ip == nil || ip.IsUnspecified() {
		host = a.advertise.String()
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(a.apiserverPort))
}

// apiserverHostPort is apiserverURL's host:port, as the kubeconfigs'
// alternative services list it.
func (a addresses) apiserverHostPort() string {
	return apiserverURLHost(a.apiserverURL())
}

// host is the address this server's etcd serves other servers on: the
// advertised address when it is a host's (not loopback, not the pod
// bridge's address up made for a laptop cluster); nil otherwise, and then
// no other server can join this one.
func (a addresses) host() net.IP {
	if a.advertise == nil || a.advertise.IsLoopback() || a.advertise.IsUnspecified() || a.bridge != nil {
		return nil
	}
	return a.advertise
}

// hostString is host as a string, "" for none.
func (a addresses) hostString() string {
	if ip := a.host(); ip != nil {
		return ip.String()
	}
	return ""
}

// node is the Node's InternalIP: --node-ip, else the API server's
// advertised address.
func (a addresses) node() string {
	if a.nodeIP != "" {
		return a.nodeIP
	}
	return a.advertise.String()
}

// probeHost is where the API server's probes reach it: its --bind-address
// (a server on a host address does not listen on loopback), or loopback
// when it listens on every address.
func (a addresses) probeHost() string {
	if ip := netutils.ParseIPSloppy(a.bind); ip != nil && !ip.IsUnspecified() {
		return ip.String()
	}
	return "127.0.0.1"
}

// etcdClientURL is where this server's API server reaches its etcd.
func (a addresses) etcdClientURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(a.etcdClientPort)
}

// etcdPeerURL is where the other members reach this one.
func (a addresses) etcdPeerURL() string {
	host := "127.0.0.1"
	if ip := a.host(); ip != nil {
		host = ip.String()
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(a.etcdPeerPort))
}

// readinessWebhook is where this server's readiness-gate webhook serves,
// and where its API server calls it.
func (a addresses) readinessWebhook() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(a.webhookPort))
}
