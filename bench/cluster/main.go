// Command cluster measures a whole "steadyplane up" cluster on 127.0.0.1, in
// one run:
//
//   - "up" cold (a new data directory) and warm (the same again) to the API
//     server ready and to every component ready ("steadyplane is up");
//
//   - a rollout of a --replicas Deployment whose app needs 3s before it
//     serves, in a namespace with the load-balancer gate and in one without:
//     its duration, and the fewest pods passing an outside HTTP check in any
//     100ms sample.
//
//     sudo go run ./bench/cluster [--replicas 5]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/internal/testenv"
)

func main() {
	replicas := flag.Int("replicas", 5, "replicas of the Deployment rolled out")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *replicas); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// upRun is a running "steadyplane up" and when its progress lines came.
type upRun struct {
	cmd                *exec.Cmd
	apiReady, allReady time.Duration
}

func startUp(ctx context.Context, bin, dataDir string, ports []int) (*upRun, error) {
	cmd := exec.CommandContext(ctx, bin, "up", "--data-dir", dataDir,
		"--apiserver-port", strconv.Itoa(ports[0]), "--etcd-client-port", strconv.Itoa(ports[1]), "--etcd-peer-port", strconv.Itoa(ports[2]),
		"--node-metrics-port", strconv.Itoa(ports[3]), "--readiness-webhook-port", strconv.Itoa(ports[4]), "--node-api-port", strconv.Itoa(ports[5]),
		"--controller-manager-port", strconv.Itoa(ports[6]), "--scheduler-port", strconv.Itoa(ports[7]),
		"--pod-cidr", fmt.Sprintf("10.248.%d.0/24", ports[0]%250), "--cni-bridge", fmt.Sprintf("spc%d", ports[0]))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	u := &upRun{cmd: cmd}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "apiserver ready in"):
			u.apiReady = time.Since(start)
		case strings.Contains(line, "steadyplane is up"):
			u.allReady = time.Since(start)
			go func() {
				for sc.Scan() {
				}
			}()
			return u, nil
		}
	}
	_ = cmd.Wait()
	return nil, fmt.Errorf("up exited before it was up")
}

func (u *upRun) stop() {
	_ = u.cmd.Process.Signal(syscall.SIGTERM)
	_ = u.cmd.Wait()
}

func run(ctx context.Context, replicas int) error {
	bin, err := testenv.Binary()
	if err != nil {
		return err
	}
	kubectlBin, err := testenv.Kubectl()
	if err != nil {
		return err
	}
	ports, err := testenv.FreePorts(8)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "steadyplane-bench-cluster-")
	if err != nil {
		return err
	}
	dataDir := filepath.Join(work, ".steadyplane")
	defer func() {
		testenv.CleanNode(filepath.Join(dataDir, "node"))
		_ = exec.Command("ip", "link", "del", fmt.Sprintf("spc%d", ports[0])).Run()
		os.RemoveAll(work)
	}()

	cold, err := startUp(ctx, bin, dataDir, ports)
	if err != nil {
		return err
	}
	cold.stop()
	warm, err := startUp(ctx, bin, dataDir, ports)
	if err != nil {
		return err
	}
	defer warm.stop()
	fmt.Printf("up cold: API ready %.1fs, all components ready %.1fs\n", cold.apiReady.Seconds(), cold.allReady.Seconds())
	fmt.Printf("up warm: API ready %.1fs, all components ready %.1fs\n", warm.apiReady.Seconds(), warm.allReady.Seconds())

	kubeconfig := filepath.Join(dataDir, "admin.kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	kubectl := func(args ...string) error {
		out, err := exec.CommandContext(ctx, kubectlBin, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	for _, gated := range []bool{true, false} {
		ns := "plain"
		if gated {
			ns = "gated"
		}
		steps := [][]string{{"create", "namespace", ns}}
		if gated {
			steps = append(steps, []string{"label", "namespace", ns, "steadyplane.io/readiness-gates=on"})
		}
		steps = append(steps,
			[]string{"-n", ns, "create", "deployment", "web", "--image=local/python", "--replicas=" + strconv.Itoa(replicas), "--port=8080", "--", "sh", "-c", "sleep 3; exec python3 -m http.server 8080"},
			[]string{"-n", ns, "patch", "deployment", "web", "-p", `{"spec":{"strategy":{"rollingUpdate":{"maxUnavailable":0,"maxSurge":1}}}}`},
			[]string{"-n", ns, "rollout", "status", "deployment/web", "--timeout=300s"})
		for _, s := range steps {
			if err := kubectl(s...); err != nil {
				return err
			}
		}
		// Wait until every pod serves before the rollout starts.
		sampler := &testenv.PassingSampler{}
		sctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { sampler.Run(sctx, cs, ns, "app=web", replicas); close(done) }()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if _, n := sampler.Result(); n > 0 {
				break
			}
		}
		start := time.Now()
		err := kubectl("-n", ns, "set", "env", "deployment/web", "V=2")
		if err == nil {
			err = kubectl("-n", ns, "rollout", "status", "deployment/web", "--timeout=600s")
		}
		took := time.Since(start)
		stop()
		<-done
		if err != nil {
			return err
		}
		minimum, samples := sampler.Result()
		label := "without the gate"
		if gated {
			label = "with the gate   "
		}
		fmt.Printf("rollout of %d replicas %s: %.1fs, fewest pods passing an outside HTTP check %d of %d (%d samples every 100ms)\n",
			replicas, label, took.Seconds(), minimum, replicas, samples)
	}
	return nil
}
