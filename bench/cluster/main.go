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
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
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

func run(ctx context.Context, replicas int) error {
	bin, err := testenv.Binary()
	if err != nil {
		return err
	}
	kubectlBin, err := testenv.Kubectl()
	if err != nil {
		return err
	}
	b, err := testenv.NewBenchUp("cluster", 248, "spc")
	if err != nil {
		return err
	}
	defer b.Cleanup()
	dataDir, args := b.DataDir, b.Args

	// The app runs from busybox, imported at start as a user would bring
	// it to a machine without a registry.
	if err := testimage.BusyboxArchive(filepath.Join(dataDir, "images", "busybox.tar")); err != nil {
		return err
	}
	cold, err := testenv.StartUp(ctx, bin, args)
	if err != nil {
		return err
	}
	cold.Stop()
	warm, err := testenv.StartUp(ctx, bin, args)
	if err != nil {
		return err
	}
	defer warm.Stop()
	fmt.Printf("up cold: API ready %.1fs, all components ready %.1fs\n", cold.APIReady.Seconds(), cold.AllReady.Seconds())
	fmt.Printf("up warm: API ready %.1fs, all components ready %.1fs\n", warm.APIReady.Seconds(), warm.AllReady.Seconds())

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
			[]string{"-n", ns, "create", "deployment", "web", "--image=" + testimage.BusyboxName, "--replicas=" + strconv.Itoa(replicas), "--port=8080", "--", "sh", "-c", "sleep 3; echo ok > index.html; exec httpd -f -p 8080"},
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
