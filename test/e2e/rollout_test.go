package e2e

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testup"
)

// TestRolloutWaitsForTheLoadBalancer runs the README's rollout walkthrough
// verbatim while sampling, every 100ms, how many of the Deployment's pods
// pass an outside HTTP check: with the load-balancer gate the count never
// drops below the replicas. The same rollout in a namespace without the
// gate is measured too, and its low point logged (not asserted).
func TestRolloutWaitsForTheLoadBalancer(t *testing.T) {
	block := testup.ReadmeBlock(t, "A Deployment whose rollout waits for the load balancer")
	ctx, dataDir, run := testup.StartWalkthrough(t, 12*time.Minute)
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dataDir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)

	// The walkthrough runs in two pieces: up to the rollout, then, once
	// every pod serves and the sampler is steady, the rollout itself.
	rollout := func(name, ns, script string, throughService bool) (int, int) {
		t.Helper()
		i := strings.Index(script, "kubectl -n "+ns+" set env")
		if i < 0 {
			t.Fatalf("%s: the walkthrough has no set env step", name)
		}
		run(name+", the Deployment", script[:i])
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		s := &testenv.PassingSampler{}
		done := make(chan struct{})
		go func() { s.Run(sctx, cs, ns, "app=web", 3); close(done) }()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if _, n := s.Result(); n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the 3 pods never all answered", name)
			}
		}
		out := run(name+", the rollout", "export KUBECONFIG=$PWD/.steadyplane/admin.kubeconfig\n"+script[i:])
		if throughService && !strings.Contains(out, "\nhello\n") {
			t.Errorf("%s: no pod answered a client through the Service's name:\n%s", name, out)
		}
		stop()
		<-done
		return s.Result()
	}
	gated, samples := rollout("with the gate (README)", "shop", block, true)
	t.Logf("with the gate: at least %d of 3 pods passed the HTTP check in each of %d samples", gated, samples)
	if samples < 30 || gated < 3 {
		t.Errorf("with the gate: the minimum of pods passing was %d over %d samples; want 3 at every sample (and a rollout of at least 3s)", gated, samples)
	}

	// The same rollout where no gate waits for the load balancer.
	plain := strings.NewReplacer("namespace shop", "namespace plain", "-n shop", "-n plain").Replace(block)
	plain = strings.ReplaceAll(plain, "kubectl label namespace plain steadyplane.io/readiness-gates=on\n", "")
	// Without the gate the rollout may end before the new pods serve (that
	// is the point): a client right after it can be refused.
	plain = regexp.MustCompile(`(?m)^kubectl -n plain run client .*\n`).ReplaceAllString(plain, "")
	ungated, samples := rollout("without the gate", "plain", plain, false)
	t.Logf("without the gate: as few as %d of 3 pods passed the HTTP check (%d samples)", ungated, samples)
}
