package podnet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"

	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
)

// MasqueradeChain is the nat chain that gives what the node's pods send off
// the node (outside their pod range) the node's address, as the bridge
// plugin's ipMasq does, but for every pod at once: the plugin makes a
// chain of its own for each pod, with several runs of iptables when the
// pod starts and again when it stops, while 30 pods starting at once are
// short of CPU.
const MasqueradeChain utiliptables.Chain = "STEADYPLANE-POD-MASQ"

// masqueradeComment marks the jumps to MasqueradeChain, one per pod range
// of an agent on this host.
const masqueradeComment = "steadyplane: pods' traffic leaving the node"

// MasqueradeRules is the iptables-restore input of MasqueradeChain:
// multicast keeps its source, everything else is masqueraded. Which
// traffic reaches it is said by the jumps (MasqueradeJump); traffic to
// other nodes' pods was accepted before (PeerChain).
func MasqueradeRules() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*nat\n:%s - [0:0]\n", MasqueradeChain)
	fmt.Fprintf(&b, "-A %s -d 224.0.0.0/4 -j RETURN\n", MasqueradeChain)
	fmt.Fprintf(&b, "-A %s -j MASQUERADE\n", MasqueradeChain)
	b.WriteString("COMMIT\n")
	return b.Bytes()
}

// MasqueradeJump is the POSTROUTING rule that sends the traffic of the pod
// range own to anything outside it into MasqueradeChain.
func MasqueradeJump(own string) []string {
	return []string{"-s", own, "!", "-d", own, "-m", "comment", "--comment", masqueradeComment, "-j", string(MasqueradeChain)}
}

// EnsureMasquerade makes MasqueradeChain and the jump of the pod range own
// to it, appended to nat POSTROUTING (after kube-proxy's masquerade and
// PeerChain). Agents of other ranges on the same host keep their jumps.
func EnsureMasquerade(ipt utiliptables.Interface, own string) error {
	if _, err := ipt.EnsureChain(utiliptables.TableNAT, MasqueradeChain); err != nil {
		return fmt.Errorf("nat chain %s: %w", MasqueradeChain, err)
	}
	if err := ipt.RestoreAll(MasqueradeRules(), utiliptables.NoFlushTables, utiliptables.NoRestoreCounters); err != nil {
		return fmt.Errorf("nat chain %s: %w", MasqueradeChain, err)
	}
	if _, err := ipt.EnsureRule(utiliptables.Append, utiliptables.TableNAT, utiliptables.ChainPostrouting, MasqueradeJump(own)...); err != nil {
		return fmt.Errorf("jump to %s: %w", MasqueradeChain, err)
	}
	return nil
}

// RemoveMasquerade removes the jump of the pod range own (the chain stays
// for the other ranges' jumps; "steadyplane cleanup" removes it).
func RemoveMasquerade(ipt utiliptables.Interface, own string) error {
	return ipt.DeleteRule(utiliptables.TableNAT, utiliptables.ChainPostrouting, MasqueradeJump(own)...)
}

// RemoveMasqueradeOf removes the jump of the pod network whose
// configuration is at confPath (New wrote it), if there is one: what
// "steadyplane cleanup" does for an agent that was killed.
func RemoveMasqueradeOf(ipt utiliptables.Interface, confPath string) error {
	b, err := os.ReadFile(confPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var c struct {
		Plugins []struct {
			IPAM struct {
				Ranges [][]struct {
					Subnet string `json:"subnet"`
				} `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("%s: %w", confPath, err)
	}
	for _, p := range c.Plugins {
		for _, r := range p.IPAM.Ranges {
			for _, sub := range r {
				if _, cidr, err := net.ParseCIDR(sub.Subnet); err == nil && cidr.IP.To4() != nil {
					if err := RemoveMasquerade(ipt, cidr.String()); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}
