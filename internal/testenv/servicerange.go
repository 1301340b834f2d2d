package testenv

import (
	"fmt"
	"os/exec"
	"strings"
)

// DropServiceRange drops packets to cidr in OUTPUT and FORWARD (both run
// after a proxy's DNAT, so rewritten packets pass) and returns the undo.
// It refuses a range that a route on the machine already uses.
func DropServiceRange(cidr string) (func(), error) {
	return dropServiceRange(exec.Command, cidr)
}

// DropServiceRange is testenv.DropServiceRange on host i, whose packet
// filter and routes are its own.
func (nw *Network) DropServiceRange(i int, cidr string) (func(), error) {
	return dropServiceRange(func(name string, args ...string) *exec.Cmd {
		return exec.Command("nsenter", append([]string{"--net=/run/netns/" + nw.Hosts[i].Namespace, "--", name}, args...)...)
	}, cidr)
}

func dropServiceRange(command func(string, ...string) *exec.Cmd, cidr string) (func(), error) {
	out, err := command("ip", "-4", "route", "show", "match", cidr).Output()
	if err != nil {
		return nil, fmt.Errorf("ip route show match %s: %w", cidr, err)
	}
	routes := string(out)
	for _, r := range strings.Split(routes, "\n") {
		if r != "" && !strings.HasPrefix(r, "default") {
			return nil, fmt.Errorf("the service range %s is routed on this machine (%s)", cidr, r)
		}
	}
	rule := []string{"-d", cidr, "-m", "comment", "--comment", "steadyplane test: no cluster IP leaves the machine", "-j", "DROP"}
	var added []string
	undo := func() {
		for _, chain := range added {
			_ = command("iptables", append([]string{"-D", chain}, rule...)...).Run()
		}
	}
	for _, chain := range []string{"OUTPUT", "FORWARD"} {
		if out, err := command("iptables", append([]string{"-I", chain}, rule...)...).CombinedOutput(); err != nil {
			undo()
			return nil, fmt.Errorf("iptables -I %s: %v: %s", chain, err, out)
		}
		added = append(added, chain)
	}
	return undo, nil
}
