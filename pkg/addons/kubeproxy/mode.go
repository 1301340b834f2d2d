package kubeproxy

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Modes of kube-proxy that steadyplane chooses between.
const (
	ModeAuto     = "auto"
	ModeNFTables = "nftables"
	ModeIPTables = "iptables"
)

// nftablesMinKernel is the oldest kernel kube-proxy's nftables mode
// accepts (upstream checks for 5.13).
var nftablesMinKernel = [2]int{5, 13}

// ChooseMode decides kube-proxy's mode from the request (auto, nftables or
// iptables), the kernel release (uname -r) and which of the nft and
// iptables programs the machine has. auto prefers nftables, which also
// drops traffic to cluster IPs no Service owns; iptables mode does not, so
// a warning says so.
func ChooseMode(requested, kernel string, haveNFT, haveIPTables bool) (mode, warning string, err error) {
	nftOK := haveNFT && kernelAtLeast(kernel, nftablesMinKernel)
	switch requested {
	case ModeNFTables:
		if !haveNFT {
			return "", "", fmt.Errorf("--proxy-mode=nftables needs the nft program (Debian package nftables)")
		}
		if !nftOK {
			return "", "", fmt.Errorf("--proxy-mode=nftables needs Linux %d.%d or later; this kernel is %s (use --proxy-mode=iptables)", nftablesMinKernel[0], nftablesMinKernel[1], kernel)
		}
		return ModeNFTables, "", nil
	case ModeIPTables:
		if !haveIPTables {
			return "", "", fmt.Errorf("--proxy-mode=iptables needs the iptables programs (Debian package iptables)")
		}
		return ModeIPTables, iptablesWarning, nil
	case ModeAuto, "":
		if nftOK {
			return ModeNFTables, "", nil
		}
		if haveIPTables {
			return ModeIPTables, iptablesWarning, nil
		}
		return "", "", fmt.Errorf("kube-proxy needs nft (Linux %d.%d or later) or iptables; this machine has neither (install nftables or iptables, or pass --proxy=false)", nftablesMinKernel[0], nftablesMinKernel[1])
	}
	return "", "", fmt.Errorf("--proxy-mode=%q: auto, nftables or iptables", requested)
}

const iptablesWarning = "kube-proxy runs in iptables mode: traffic to a cluster IP that no Service owns is not dropped on this node"

// ChooseModeHere is ChooseMode for this machine's kernel and programs, as
// lookPath finds them.
func ChooseModeHere(requested string, lookPath func(string) (string, error)) (mode, warning string, err error) {
	_, nftErr := lookPath("nft")
	_, iptErr := lookPath("iptables-restore")
	return ChooseMode(requested, kernelRelease(), nftErr == nil, iptErr == nil)
}

// kernelAtLeast says whether a release such as "6.1.0-18-amd64" is at least
// min (major, minor); an unreadable release is not.
func kernelAtLeast(release string, min [2]int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	digits := func(s string) string { return s[:len(s)-len(strings.TrimLeft(s, "0123456789"))] }
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(digits(parts[1]))
	if err1 != nil || err2 != nil {
		return false
	}
	return major > min[0] || major == min[0] && minor >= min[1]
}

// kernelRelease is uname -r.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
