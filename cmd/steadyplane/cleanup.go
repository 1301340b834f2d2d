package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/kubernetes/pkg/proxy/iptables"
	"k8s.io/kubernetes/pkg/proxy/nftables"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/runc"
	"github.com/steadyplane/steadyplane/pkg/procfs"
)

func newCleanupCommand() *cobra.Command {
	dataDir, bridge := ".steadyplane", "steadyplane0"
	var removeData bool
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Stop what an `up` killed with -9 left running, and unmount its files (as k3s-killall.sh)",
		Long: `Stop everything an "up" in --data-dir left behind when it could not stop in order (kill -9,
a crash, a power cut while the data directory was on a surviving disk): its processes
(etcd, the API server, the node agent, container monitors), every container the node agent
ran, every mount under the data directory (pod root filesystems, namespaces), and the
pods' bridge and kube-proxy's rules. The data stays unless --remove-data: the next "up" continues from it.`,
		Example: `  sudo steadyplane cleanup --data-dir .steadyplane
  sudo steadyplane cleanup --remove-data   # and rm -rf .steadyplane`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			abs, err := filepath.Abs(dataDir)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
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
			if exec.Command("ip", "link", "show", bridge).Run() == nil {
				if out, err := exec.Command("ip", "link", "del", bridge).CombinedOutput(); err != nil {
					return fmt.Errorf("removing bridge %s: %v: %s", bridge, err, out)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed bridge %s\n", bridge)
			}
			// kube-proxy leaves its rules when it stops, as upstream's does
			// (a restarted proxy takes them over). Only when this data
			// directory ran one: the rules are the machine's, not the
			// directory's.
			if _, err := os.Stat(filepath.Join(abs, "kube-proxy.kubeconfig")); err == nil && os.Geteuid() == 0 {
				if err := cleanupProxyRules(cmd.Context()); err != nil {
					return err
				}
				fmt.Fprintln(out, "removed kube-proxy's rules (nftables table kube-proxy, iptables KUBE-* chains)")
			}
			if removeData {
				if err := os.RemoveAll(abs); err != nil {
					return err
				}
				fmt.Fprintf(out, "removed %s\n", abs)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", dataDir, "Data directory of the `up` to clean up after.")
	cmd.Flags().StringVar(&bridge, "cni-bridge", bridge, "The pods' bridge that `up` made (its --cni-bridge).")
	cmd.Flags().BoolVar(&removeData, "remove-data", false, "Also remove the data directory (the cluster's state, certificates and images).")
	return cmd
}

// cleanupProxyRules removes kube-proxy's nftables and iptables rules with
// upstream's own cleanup (not its IPVS one, which would flush every IPVS
// service of the machine).
func cleanupProxyRules(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	nft := nftables.CleanupLeftovers(ctx)
	ipt := iptables.CleanupLeftovers(ctx)
	if nft || ipt {
		return errors.New("removing kube-proxy's rules failed (see the log above); the next kube-proxy takes them over, or remove them with nft and iptables")
	}
	return nil
}
