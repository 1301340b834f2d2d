package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	"github.com/steadyplane/steadyplane/pkg/fallback/monitor"
)

func newStartupMonitorCommand() *cobra.Command {
	var (
		rev                            revisionFlags
		nodeName, kubeconfig, agentURL string
		interval                       time.Duration
		timeouts                       = monitor.DefaultTimeouts
	)
	cmd := &cobra.Command{
		Use:   "startup-monitor",
		Short: "Watch one revision of a static pod start; mark it last-known-good or fall back",
		Long: `Watch revision --revision of the operand static pod (the API server) start, as a
static pod next to it, and end in one of two ways:

- ready (started, /healthz and /readyz ok, the mirror pod Ready with the revision):
  point <data-dir>/static-pod-resources/<operand>-last-known-good at the revision;
- failed: put the last-known-good revision's manifest (or, without the link, the newest
  earlier one; in bootstrap none) back into <data-dir>/manifests with the annotations
  startup-monitor.steadyplane.io/fallback-for-revision, -fallback-reason and
  -fallback-message. Reasons: NeverStartedUp (the manifest cannot run, or no start
  within --first-start-timeout), CrashLooping (started twice and not healthy; both at
  once, no timeout), Unhealthy, EtcdUnhealthy, NotReady (after --timeout).

Either way it then removes its own manifest. While the operand manifest belongs to
another revision it waits. Every look holds the installer lock. Start attempts and
termination messages come from the node agent's local status, which answers while the
API server does not.`,
		Example: `  steadyplane startup-monitor --data-dir .steadyplane --revision 3 --node-name steadyplane \
    --kubeconfig .steadyplane/credentials/startup-monitor/kubeconfig`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			if err := rev.check(); err != nil {
				return err
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return fmt.Errorf("--kubeconfig=%q: %w", kubeconfig, err)
			}
			server, err := monitor.NewAPIServer(cfg)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			m := &monitor.Monitor{
				Layout: rev.layout(), Revision: rev.revision, NodeName: nodeName, Timeouts: timeouts,
				Agent:  monitor.AgentEndpoint{URL: agentURL, Client: http.DefaultClient},
				Server: server, Clock: clock.RealClock{}, Log: log, Etcd: monitor.EtcdDialer{},
			}
			v, err := m.Run(ctx, interval)
			if err != nil {
				return err
			}
			log.Info("startup monitor done", "revision", rev.revision, "action", v.Action.String(), "reason", string(v.Reason), "message", v.Message)
			return nil
		},
	}
	fs := cmd.Flags()
	rev.add(fs, "The revision watched.")
	fs.StringVar(&nodeName, "node-name", "steadyplane", "This node's name (the mirror pod is <operand>-<node-name>).")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig of the monitor's identity, for the operand API server (get pods in kube-system).")
	fs.StringVar(&agentURL, "node-status-url", "http://127.0.0.1:10255", "The node agent's read-only loopback endpoint (its --metrics-bind-address).")
	fs.DurationVar(&interval, "interval", time.Second, "How often the monitor looks.")
	fs.DurationVar(&timeouts.FirstStart, "first-start-timeout", timeouts.FirstStart, "NeverStartedUp when the node agent makes no start attempt within this.")
	fs.DurationVar(&timeouts.Ready, "timeout", timeouts.Ready, "Unhealthy, EtcdUnhealthy or NotReady when a started revision is not ready within this.")
	for _, f := range []string{"revision", "kubeconfig"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}
