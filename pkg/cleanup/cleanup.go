// Package cleanup stops what an "up" killed with -9 left running and
// unmounts its files, as k3s-killall.sh does: its processes, every
// container the node agent ran, every mount under the data directory, the
// pods' bridge, their masquerade rule and kube-proxy's rules
// ("steadyplane cleanup").
package cleanup

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	utiliptables "k8s.io/kubernetes/pkg/util/iptables"

	"github.com/steadyplane/steadyplane/pkg/addons/kubeproxy"
	"github.com/steadyplane/steadyplane/pkg/addons/kubeproxy/rules"
	"github.com/steadyplane/steadyplane/pkg/node/podnet"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/runc"
	"github.com/steadyplane/steadyplane/pkg/procfs"
)

// Options say what to clean up after.
type Options struct {
	// DataDir is the data directory of the up to clean up after.
	DataDir string
	// Bridge is the pods' bridge that up made (its --cni-bridge).
	Bridge string
	// RemoveData also removes the data directory.
	RemoveData bool
	// Out receives what was done.
	Out io.Writer
}

// Run stops the processes of o.DataDir first, so that nothing restarts
// what is removed next, then its containers, mounts, bridge and
// kube-proxy's rules. The data stays unless o.RemoveData: the next "up"
// continues from it.
func Run(ctx context.Context, o Options) error {
	if ctx == nil {
		ctx = context.Background()
	}
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	abs, err := filepath.Abs(o.DataDir)
	if err != nil {
		return err
	}
	// Processes first, so that nothing restarts what is removed next.
	pids := procfs.Find(func(argv []string) bool { return strings.Contains(strings.Join(argv, "\x00"), abs) })
	self := os.Getpid()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		var alive []int
		for _, pid := range pids {
			if pid != self && syscall.Kill(pid, sig) == nil {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			break
		}
		fmt.Fprintf(out, "sent %v to %d processes of %s\n", sig, len(alive), abs)
		time.Sleep(2 * time.Second)
	}
	ids, err := runc.KillAll("", filepath.Join(abs, "node", "runc"))
	if len(ids) > 0 {
		fmt.Fprintf(out, "killed %d containers\n", len(ids))
	}
	if err != nil {
		return err
	}
	if err := runtime.UnmountUnder(abs); err != nil {
		return err
	}
	fmt.Fprintf(out, "nothing is mounted under %s\n", abs)
	if exec.Command("ip", "link", "show", o.Bridge).Run() == nil {
		if out, err := exec.Command("ip", "link", "del", o.Bridge).CombinedOutput(); err != nil {
			return fmt.Errorf("removing bridge %s: %v: %s", o.Bridge, err, out)
		}
		fmt.Fprintf(out, "removed bridge %s\n", o.Bridge)
	}
	if os.Geteuid() == 0 && podnet.IPTablesAvailable() {
		if err := podnet.RemoveMasqueradeOf(utiliptables.New(utiliptables.ProtocolIPv4), filepath.Join(abs, "node", "cni", "net.conflist")); err != nil {
			return fmt.Errorf("removing the pods' masquerade rule: %w", err)
		}
	}
	// kube-proxy leaves its rules when it stops, as upstream's does
	// (a restarted proxy takes them over). Only when this data
	// directory ran one: the rules are the machine's, not the
	// directory's.
	if kubeproxy.Ran(abs) && os.Geteuid() == 0 {
		if err := rules.Cleanup(ctx); err != nil {
			return err
		}
		fmt.Fprintln(out, "removed kube-proxy's rules (nftables table kube-proxy, iptables KUBE-* chains)")
	}
	if o.RemoveData {
		if err := os.RemoveAll(abs); err != nil {
			return err
		}
		fmt.Fprintf(out, "removed %s\n", abs)
	}
	return nil
}
