package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/release"
)

// clusterPods is the pods' range of the benchmark's cluster.
const clusterPods = "10.219.0.0/16"

// runCluster measures releases rolled over servers servers and workers
// workers in network namespaces (testenv.ClusterLayout): v0.9.1 to
// v0.9.2, the broken v0.9.3 (its up exits; the server it reached is
// started again, as a service manager would), the fixed v0.9.4, then
// --rollback. It prints, per rollout, each node's time to move (the
// operator's status: asked to healthy on it), the whole rollout, the
// reader's failed reads and longest gap, and the pods' restarts.
func runCluster(ctx context.Context, servers, workers, pods int) error {
	fmt.Println("building releases v0.9.1, v0.9.2, v0.9.4 and a broken v0.9.3 ...")
	bins := map[string]string{}
	for _, r := range []string{"v0.9.1", "v0.9.2", "v0.9.4"} {
		b, err := testenv.BinaryOfRelease(r)
		if err != nil {
			return err
		}
		bins[r] = b
	}
	info, err := release.DescribeBinary(ctx, bins["v0.9.2"])
	if err != nil {
		return err
	}
	if bins["v0.9.3"], err = testenv.BrokenRelease("v0.9.3", info.Kubernetes); err != nil {
		return err
	}
	v1 := bins["v0.9.1"]
	nw, err := testenv.NewNetwork(servers + workers)
	if err != nil {
		return err
	}
	defer nw.Close()
	work, err := os.MkdirTemp("", "bench-upgrade-cluster")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	hosts, err := testenv.ClusterLayout(nw, work, servers, workers, clusterPods)
	if err != nil {
		return err
	}
	procs := make([]*exec.Cmd, len(hosts))
	start := func(i int) error {
		cmd := hosts[i].Command(nw, v1)
		if !hosts[i].Server {
			// A worker says nothing when it is up: its Node turns Ready.
			procs[i] = cmd
			return cmd.Start()
		}
		up, err := testenv.StartUp(ctx, cmd.Args[0], cmd.Args[1:])
		if err != nil {
			return fmt.Errorf("%s: %w", hosts[i].Name, err)
		}
		procs[i] = up.Cmd()
		return nil
	}
	defer func() {
		for i, p := range procs {
			if p != nil && p.Process != nil {
				_ = p.Process.Kill()
				_ = p.Wait()
			}
			testenv.CleanHost(nw, hosts[i], v1)
		}
	}()
	began := time.Now()
	fmt.Printf("starting %d servers and %d workers of v0.9.1 ...\n", servers, workers)
	for i, h := range hosts {
		if i > 0 {
			if err := h.TakeToken(hosts[0]); err != nil {
				return err
			}
		}
		if err := start(i); err != nil {
			return err
		}
	}
	kubeconfig := filepath.Join(hosts[0].DataDir(), "admin.kubeconfig")
	cfg, _, err := clientconfig.Load(kubeconfig, clientconfig.Options{})
	if err != nil {
		return err
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	api := v1alpha1.Client{Dynamic: dynamic.NewForConfigOrDie(cfg)}
	if err := testenv.WaitReadyNodes(ctx, cs, len(hosts), 10*time.Minute); err != nil {
		return err
	}
	fmt.Printf("cluster up in %.1fs\n", time.Since(began).Seconds())
	if err := runSleepers(ctx, cs, pods); err != nil {
		return err
	}
	upgrade := func(args ...string) (string, error) {
		name, cmdArgs := nw.NSEnter(0, hosts[0].HostName, v1, append([]string{"upgrade", "--data-dir", hosts[0].DataDir(), "--wait", "30m"}, args...)...)
		out, err := exec.CommandContext(ctx, name, cmdArgs...).CombinedOutput()
		return string(out), err
	}
	roll := func(name string, args ...string) error {
		m, err := measure(ctx, cs, cfg, func() error {
			out, err := upgrade(args...)
			if err != nil {
				return fmt.Errorf("steadyplane upgrade %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return nil
		})
		if err != nil {
			return err
		}
		fmt.Printf("%s: %.1fs; each node: %s; reads %d, failed %d, longest gap %.2fs; pods %d: restarts %d, containers changed %d\n",
			name, m.took.Seconds(), nodeMoves(ctx, api), m.reads, m.failedReads, m.longestGap.Seconds(), pods, m.restarts, m.changed)
		return nil
	}
	if err := roll("v0.9.1 -> v0.9.2", "--binary", bins["v0.9.2"]); err != nil {
		return err
	}

	// The broken release: the first server it reaches dies with it.
	first := slices.IndexFunc(hosts, func(h *testenv.ClusterHost) bool { return h.Server && h.Name != "steadyplane" })
	asked := time.Now()
	stopped := make(chan error, 1)
	go func() {
		_, err := upgrade("--binary", bins["v0.9.3"])
		stopped <- err
	}()
	_ = procs[first].Wait()
	died := time.Since(asked)
	restarted := time.Now()
	if err := start(first); err != nil {
		return err
	}
	back := time.Since(restarted)
	if err := <-stopped; err == nil {
		return fmt.Errorf("the broken release rolled out")
	}
	fmt.Printf("broken v0.9.3: %s's up exited %.1fs after the upgrade began; started again, up on v0.9.2 in %.1fs, the rollout stopped %.1fs after the restart\n",
		hosts[first].Name, died.Seconds(), back.Seconds(), time.Since(restarted).Seconds())

	if err := roll("v0.9.2 -> v0.9.4 (the fix)", "--binary", bins["v0.9.4"]); err != nil {
		return err
	}
	return roll("v0.9.4 -> v0.9.2 (--rollback)", "--rollback")
}

// nodeMoves is each node's time to move in the last rollout, from the
// operator's status.
func nodeMoves(ctx context.Context, api v1alpha1.Client) string {
	k, err := api.Get(ctx, v1alpha1.Name)
	if err != nil || k.Status.Release == nil {
		return fmt.Sprintf("(status: %v)", err)
	}
	var moves []string
	for _, n := range k.Status.Release.Nodes {
		role := "worker"
		if n.Server {
			role = "server"
		}
		if n.Asked != nil && n.Moved != nil {
			moves = append(moves, fmt.Sprintf("%s %s %.1fs", role, n.NodeName, n.Moved.Sub(n.Asked.Time).Seconds()))
		}
	}
	return strings.Join(moves, ", ")
}
