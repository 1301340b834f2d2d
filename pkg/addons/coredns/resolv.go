package coredns

// SystemdResolvConf is systemd-resolved's list of the real upstream
// servers, which the kubelet is pointed at where /etc/resolv.conf names
// only its 127.0.0.53 stub.
const SystemdResolvConf = "/run/systemd/resolve/resolv.conf"

// NodeResolvConf chooses the node's resolver file, which pods with
// dnsPolicy Default (CoreDNS among them) get: the one given, else
// /etc/resolv.conf unless it names only a loopback stub and systemd-resolved's
// file exists (what kubeadm does for the kubelet).
func NodeResolvConf(given string, etc []byte, systemdExists bool) string {
	if given != "" {
		return given
	}
	if !HasNameserver(etc) && systemdExists {
		return SystemdResolvConf
	}
	return "/etc/resolv.conf"
}
