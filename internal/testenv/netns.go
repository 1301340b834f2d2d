package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/steadyplane/steadyplane/internal/testci"
)

// Network is a set of test hosts on one machine: one network namespace per
// host, each with an address on a bridge in the test's own namespace, so the
// test (and the hosts) reach every host's address and nothing else. The API
// server refuses loopback addresses in the kubernetes Endpoints, which is why
// multi-server tests need it.
type Network struct {
	// Subnet is the /24 the hosts live in; .1 is the test's own address.
	Subnet *net.IPNet
	// Hosts are the hosts' namespaces and addresses.
	Hosts  []NetHost
	bridge string
}

// NetHost is one test host.
type NetHost struct {
	Namespace string
	IP        net.IP
}

// namePrefix starts every namespace and link a Network makes; the process
// id that follows tells whether their owner is still alive.
const namePrefix = "spt"

// subnetBase is the 10.213.0.0/16 range test subnets are taken from; a /24
// already routed on this machine is never used.
const subnetBase = "10.213."

// CanMakeNetwork reports why this process cannot make test hosts, or nil.
func CanMakeNetwork() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("the ip command (Debian package iproute2) is missing")
	}
	return nil
}

// NewNetwork makes n test hosts. Close removes everything it made; namespaces
// and links left by test processes that died are removed first.
func NewNetwork(n int) (*Network, error) {
	if err := CanMakeNetwork(); err != nil {
		return nil, err
	}
	if n < 1 || n > 200 {
		return nil, fmt.Errorf("NewNetwork(%d): want 1 to 200 hosts", n)
	}
	// Choosing a subnet and creating its bridge is one step across test
	// processes: two packages' tests may run at once.
	lock, err := os.OpenFile(os.TempDir()+"/steadyplane-netns.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, err
	}
	removeStale()
	subnet, err := freeSubnet()
	if err != nil {
		return nil, err
	}
	pid := strconv.Itoa(os.Getpid())
	nw := &Network{Subnet: subnet, bridge: namePrefix + pid + "b"}
	fail := func(err error) (*Network, error) {
		nw.Close()
		return nil, err
	}
	gw := hostIP(subnet, 1)
	if err := ipCmds(
		[]string{"link", "add", nw.bridge, "type", "bridge"},
		[]string{"addr", "add", gw.String() + "/24", "dev", nw.bridge},
		[]string{"link", "set", nw.bridge, "up"},
	); err != nil {
		return fail(err)
	}
	for i := 0; i < n; i++ {
		h := NetHost{Namespace: fmt.Sprintf("%s%sn%d", namePrefix, pid, i), IP: hostIP(subnet, 11+i)}
		outside, inside := fmt.Sprintf("%s%sh%d", namePrefix, pid, i), fmt.Sprintf("%s%sc%d", namePrefix, pid, i)
		if err := ipCmds([]string{"netns", "add", h.Namespace}); err != nil {
			return fail(err)
		}
		nw.Hosts = append(nw.Hosts, h)
		if err := ipCmds(
			[]string{"link", "add", outside, "type", "veth", "peer", "name", inside},
			[]string{"link", "set", outside, "master", nw.bridge, "up"},
			[]string{"link", "set", inside, "netns", h.Namespace},
			[]string{"-n", h.Namespace, "link", "set", inside, "name", "eth0"},
			[]string{"-n", h.Namespace, "addr", "add", h.IP.String() + "/24", "dev", "eth0"},
			[]string{"-n", h.Namespace, "link", "set", "eth0", "up"},
			[]string{"-n", h.Namespace, "link", "set", "lo", "up"},
		); err != nil {
			return fail(err)
		}
	}
	return nw, nil
}

// Command returns a command that runs name with args on host i, with a UTS
// namespace and host name of its own (the API server derives its identity
// lease from the host name, so hosts must not share one).
func (nw *Network) Command(i int, hostname, name string, args ...string) (string, []string) {
	full := append([]string{"netns", "exec", nw.Hosts[i].Namespace, "unshare", "--uts", "--", "sh", "-c", `hostname "$0" && exec "$@"`, hostname, name}, args...)
	return "ip", full
}

// NSEnter is Command for programs that run containers: it enters only the
// host's network namespace. "ip netns exec" also mounts a /sys of the
// namespace's own, which hides the cgroup mounts from runc ("no cgroup
// mount found in mountinfo").
func (nw *Network) NSEnter(i int, hostname, name string, args ...string) (string, []string) {
	return "nsenter", append([]string{"--net=/run/netns/" + nw.Hosts[i].Namespace, "--", "unshare", "--uts", "--",
		"sh", "-c", `hostname "$0" && exec "$@"`, hostname, name}, args...)
}

// Pids are the processes in host i's network namespace.
func (nw *Network) Pids(i int) []int {
	out, _ := exec.Command("ip", "netns", "pids", nw.Hosts[i].Namespace).Output()
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// KillAll kills every process on host i with SIGKILL, as a host that loses
// its power: nothing of it stops cleanly.
func (nw *Network) KillAll(i int) int {
	pids := nw.Pids(i)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(pids)
}

// BlackHole makes host i vanish without a word: its link goes down, so
// packets to it are dropped and nothing answers, not even a reset.
func (nw *Network) BlackHole(i int) error {
	return ipCmds([]string{"-n", nw.Hosts[i].Namespace, "link", "set", "eth0", "down"})
}

// Restore undoes BlackHole.
func (nw *Network) Restore(i int) error {
	return ipCmds([]string{"-n", nw.Hosts[i].Namespace, "link", "set", "eth0", "up"})
}

// lossyRule is the iptables rule of chain that drops a share of host i's
// packets on its link (not its loopback): statistic's random match (this
// kernel has no netem).
func lossyRule(chain string, percent int) []string {
	dir := "-i"
	if chain == "OUTPUT" {
		dir = "-o"
	}
	return []string{dir, "eth0", "-m", "statistic", "--mode", "random", "--probability", fmt.Sprintf("%.2f", float64(percent)/100),
		"-m", "comment", "--comment", "steadyplane test: lossy link", "-j", "DROP"}
}

// Lossy drops percent of the packets host i sends and receives on its
// link, at random, until Unlossy.
func (nw *Network) Lossy(i, percent int) error {
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		args := append([]string{"netns", "exec", nw.Hosts[i].Namespace, "iptables", "-I", chain}, lossyRule(chain, percent)...)
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			nw.Unlossy(i, percent)
			return fmt.Errorf("iptables -I %s on host %d: %v: %s", chain, i, err, out)
		}
	}
	return nil
}

// Unlossy undoes Lossy(i, percent).
func (nw *Network) Unlossy(i, percent int) {
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		args := append([]string{"netns", "exec", nw.Hosts[i].Namespace, "iptables", "-D", chain}, lossyRule(chain, percent)...)
		_ = exec.Command("ip", args...).Run()
	}
}

// Close removes the namespaces (with their veths) and the bridge.
func (nw *Network) Close() {
	for _, h := range nw.Hosts {
		_ = ipCmds([]string{"netns", "del", h.Namespace})
	}
	_ = ipCmds([]string{"link", "del", nw.bridge})
}

func hostIP(subnet *net.IPNet, n int) net.IP {
	ip := make(net.IP, 4)
	copy(ip, subnet.IP.To4())
	ip[3] = byte(n)
	return ip
}

func freeSubnet() (*net.IPNet, error) {
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ip route: %v: %s", err, out)
	}
	addrs, _ := exec.Command("ip", "-4", "addr").CombinedOutput()
	used := string(out) + string(addrs)
	for i := 1; i < 255; i++ {
		prefix := subnetBase + strconv.Itoa(i) + "."
		if !strings.Contains(used, prefix) {
			_, n, _ := net.ParseCIDR(prefix + "0/24")
			return n, nil
		}
	}
	return nil, errors.New("no free 10.213.x.0/24 subnet for test hosts")
}

var staleName = regexp.MustCompile(`^` + namePrefix + `(\d+)[nhcb]`)

// removeStale deletes namespaces and links whose owning test process is gone.
func removeStale() {
	dead := func(name string) bool {
		m := staleName.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, _ := strconv.Atoi(m[1])
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && dead(f[0]) {
				_ = ipCmds([]string{"netns", "del", f[0]})
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if dead(name) {
				_ = ipCmds([]string{"link", "del", name})
			}
		}
	}
}

func ipCmds(cmds ...[]string) error {
	for _, args := range cmds {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// RequireNetwork ends t unless this process can make test hosts: a skip
// with the reason for a developer without root, a failure in CI.
func RequireNetwork(t testing.TB) {
	t.Helper()
	if err := CanMakeNetwork(); err != nil {
		testci.CannotRun(t, "needs test hosts in network namespaces (run as root with iproute2): %v", err)
	}
}

// Gateway is the test's own address on the hosts' bridge: a server the test
// runs there is reachable from every host, as a pod would be.
func (nw *Network) Gateway() net.IP { return hostIP(nw.Subnet, 1) }

// RequireUnusedRange fails t unless no route of the machine is in the
// /16 cidr (e.g. 10.216.0.0/16), which a test's cluster gives its pods.
func RequireUnusedRange(t testing.TB, cidr string) {
	t.Helper()
	if err := UnusedRange(cidr); err != nil {
		t.Fatal(err)
	}
}

// UnusedRange says why the /16 cidr is not free for a test cluster's pods
// (a route of the machine is in it), or nil.
func UnusedRange(cidr string) error {
	prefix := strings.Join(strings.SplitN(cidr, ".", 3)[:2], ".") + "."
	routes, err := exec.Command("ip", "route", "show", "table", "all").Output()
	if err != nil {
		return fmt.Errorf("the pods' range %s: ip route: %w", cidr, err)
	}
	for _, r := range strings.Split(string(routes), "\n") {
		if strings.Contains(r, prefix) {
			return fmt.Errorf("the pods' range %s must be unused on this machine; a route is in it: %s", cidr, r)
		}
	}
	return nil
}
