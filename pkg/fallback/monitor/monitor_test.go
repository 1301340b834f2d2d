package monitor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/fallback/revisions"
	"github.com/steadyplane/steadyplane/pkg/node/localstatus"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

// fakeAgent and fakeServer stand for the node agent's local status and the
// API server: the monitor's decision is what is tested here; the endpoints
// are read by the real monitor in the end-to-end tests.
type fakeAgent struct{ pods []localstatus.Pod }

func (a *fakeAgent) Pods(context.Context) ([]localstatus.Pod, error) { return a.pods, nil }

type fakeServer struct {
	healthz, readyz *Probe
	mirror          *MirrorPod
}

func (s *fakeServer) Probe(_ context.Context, path string) *Probe {
	if strings.HasPrefix(path, "/healthz") {
		return s.healthz
	}
	return s.readyz
}
func (s *fakeServer) MirrorPod(context.Context, string, string) *MirrorPod { return s.mirror }

func manifest(revision int, args string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: kube-apiserver
  namespace: kube-system
  annotations:
    steadyplane.io/revision: "%d"
spec:
  hostNetwork: true
  containers:
  - name: kube-apiserver
    image: steadyplane
    command: ["/usr/bin/steadyplane", "apiserver"%s]
`, revision, args))
}

// install writes revision n as the installer does: its directory, and the
// operand manifest and the monitor's manifest.
func install(t *testing.T, l revisions.Layout, n int, data []byte) {
	t.Helper()
	for _, d := range []string{l.RevisionDir(n), l.ManifestsDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{l.RevisionManifest(n), l.OperandManifest()} {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(l.MonitorManifest(), []byte("monitor"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func uidOf(t *testing.T, data []byte) localstatus.Pod {
	pod, err := staticpod.Parse(data, "n1")
	if err != nil {
		t.Fatal(err)
	}
	return localstatus.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Static: true}
}

func TestStep(t *testing.T) {
	ok := &Probe{OK: true, Body: "ok"}
	good2, bad3 := manifest(2, ""), manifest(3, `, "--no-such-flag"`)
	running := corev1.ContainerStatus{Name: "kube-apiserver", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	crashed := corev1.ContainerStatus{Name: "kube-apiserver", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "Error: unknown flag: --no-such-flag\n"}}}

	t.Run("crash loop: falls back to last-known-good with the annotations, leaves", func(t *testing.T) {
		l := revisions.ForDataDir(t.TempDir(), "kube-apiserver")
		install(t, l, 2, good2)
		if err := l.SetLastKnownGood(2); err != nil {
			t.Fatal(err)
		}
		install(t, l, 3, bad3)
		rec := uidOf(t, bad3)
		agent := &fakeAgent{}
		clk := clocktesting.NewFakeClock(time.Now())
		m := &Monitor{Layout: l, Revision: 3, NodeName: "n1", Timeouts: DefaultTimeouts, Agent: agent, Server: &fakeServer{}, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		steps := []struct {
			attempts int32
			status   corev1.ContainerStatus
			action   Action
		}{
			{0, corev1.ContainerStatus{}, Wait},
			{1, crashed, Wait}, // the first end: waiting for the restart
			{2, crashed, FallBack},
		}
		for i, s := range steps {
			if s.attempts > 0 {
				r := rec
				r.StartAttempts = map[string]int32{"kube-apiserver": s.attempts}
				r.Status.ContainerStatuses = []corev1.ContainerStatus{s.status}
				agent.pods = []localstatus.Pod{r}
			}
			clk.Step(time.Second)
			v, done, err := m.Step(context.Background())
			if err != nil || v.Action != s.action || done != (s.action != Wait) {
				t.Fatalf("step %d: %v %v %v, want %v", i, v, done, err, s.action)
			}
		}
		pod, err := staticpod.Parse(mustRead(t, l.OperandManifest()), "n1")
		if err != nil {
			t.Fatal(err)
		}
		a := pod.Annotations
		if a[fallback.RevisionAnnotation] != "2" || a[fallback.FallbackForRevisionAnnotation] != "3" || a[fallback.FallbackReasonAnnotation] != "CrashLooping" ||
			!strings.Contains(a[fallback.FallbackMessageAnnotation], "unknown flag: --no-such-flag") {
			t.Errorf("fallback manifest annotations: %v", a)
		}
		if _, err := os.Stat(l.MonitorManifest()); !os.IsNotExist(err) {
			t.Errorf("the monitor's manifest is still there: %v", err)
		}
		if n, _ := l.LastKnownGood(); n != 2 {
			t.Errorf("last-known-good moved to %d", n)
		}

		// Killed after the fallback, before its manifest went: the
		// restarted monitor leaves the fallback as it is and goes.
		if err := os.WriteFile(l.MonitorManifest(), []byte("monitor"), 0o600); err != nil {
			t.Fatal(err)
		}
		fellBack := mustRead(t, l.OperandManifest())
		again := &Monitor{Layout: l, Revision: 3, NodeName: "n1", Timeouts: DefaultTimeouts, Agent: agent, Server: &fakeServer{}, Clock: clk, Log: m.Log}
		if v, done, err := again.Step(context.Background()); !done || err != nil || v.Action != Leave {
			t.Fatalf("restarted monitor: %v %v %v, want Leave", v, done, err)
		}
		if _, err := os.Stat(l.MonitorManifest()); !os.IsNotExist(err) {
			t.Errorf("the restarted monitor's manifest is still there: %v", err)
		}
		if got := mustRead(t, l.OperandManifest()); string(got) != string(fellBack) {
			t.Errorf("the restarted monitor changed the fallback manifest:\n%s", got)
		}
	})

	t.Run("the ready timeout counts from the first start, not from the manifest", func(t *testing.T) {
		l := revisions.ForDataDir(t.TempDir(), "kube-apiserver")
		install(t, l, 2, good2)
		install(t, l, 3, manifest(3, ""))
		agent := &fakeAgent{}
		clk := clocktesting.NewFakeClock(time.Now())
		m := &Monitor{Layout: l, Revision: 3, NodeName: "n1", Timeouts: Timeouts{FirstStart: time.Minute, Ready: 20 * time.Second},
			Agent: agent, Server: &fakeServer{}, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		// The previous revision takes 50s to stop: no start attempt yet.
		for i := 0; i < 5; i++ {
			if v, _, err := m.Step(context.Background()); err != nil || v.Action != Wait {
				t.Fatalf("before the start: %v %v", v, err)
			}
			clk.Step(10 * time.Second)
		}
		rec := uidOf(t, manifest(3, ""))
		rec.StartAttempts = map[string]int32{"kube-apiserver": 1}
		rec.Status.ContainerStatuses = []corev1.ContainerStatus{running}
		agent.pods = []localstatus.Pod{rec}
		for _, s := range []struct {
			after time.Duration // since the previous look
			want  Action
		}{{0, Wait}, {10 * time.Second, Wait}, {9 * time.Second, Wait}, {time.Second, FallBack}} {
			clk.Step(s.after)
			v, _, err := m.Step(context.Background())
			if err != nil || v.Action != s.want {
				t.Fatalf("after the start: %v %v, want %v", v, err, s.want)
			}
			if s.want == FallBack && v.Reason != fallback.Unhealthy {
				t.Errorf("reason %s, want Unhealthy", v.Reason)
			}
		}
	})

	t.Run("ready: last-known-good points at the revision, the monitor leaves", func(t *testing.T) {
		l := revisions.ForDataDir(t.TempDir(), "kube-apiserver")
		install(t, l, 1, manifest(1, ""))
		rec := uidOf(t, manifest(1, ""))
		rec.StartAttempts = map[string]int32{"kube-apiserver": 1}
		rec.Status.ContainerStatuses = []corev1.ContainerStatus{running}
		srv := &fakeServer{healthz: ok, readyz: &Probe{Body: "[-]poststarthook/rbac/bootstrap-roles failed"}}
		m := &Monitor{Layout: l, Revision: 1, NodeName: "n1", Timeouts: DefaultTimeouts, Agent: &fakeAgent{pods: []localstatus.Pod{rec}}, Server: srv,
			Clock: clocktesting.NewFakeClock(time.Now()), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if v, done, err := m.Step(context.Background()); done || err != nil || v.Reason != fallback.NotReady {
			t.Fatalf("not ready yet: %v %v %v", v, done, err)
		}
		srv.readyz, srv.mirror = ok, &MirrorPod{Revision: "1", Ready: true}
		if v, done, err := m.Step(context.Background()); !done || err != nil || v.Action != Ready {
			t.Fatalf("ready: %v %v %v", v, done, err)
		}
		if n, err := l.LastKnownGood(); n != 1 || err != nil {
			t.Errorf("last-known-good %d %v", n, err)
		}
		if _, err := os.Stat(l.MonitorManifest()); !os.IsNotExist(err) {
			t.Errorf("the monitor's manifest is still there: %v", err)
		}
	})

	t.Run("an unparsable manifest of its revision: NeverStartedUp at once, the previous revision without a link", func(t *testing.T) {
		l := revisions.ForDataDir(t.TempDir(), "kube-apiserver")
		install(t, l, 4, manifest(4, ""))
		install(t, l, 5, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: [\n"))
		m := &Monitor{Layout: l, Revision: 5, NodeName: "n1", Timeouts: DefaultTimeouts, Agent: &fakeAgent{}, Server: &fakeServer{},
			Clock: clocktesting.NewFakeClock(time.Now()), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		v, done, err := m.Step(context.Background())
		if !done || err != nil || v.Reason != fallback.NeverStartedUp {
			t.Fatalf("%v %v %v", v, done, err)
		}
		pod, err := staticpod.Parse(mustRead(t, l.OperandManifest()), "n1")
		if err != nil || pod.Annotations[fallback.RevisionAnnotation] != "4" || pod.Annotations[fallback.FallbackForRevisionAnnotation] != "5" {
			t.Fatalf("operand after fallback: %v %v", pod, err)
		}
	})

	t.Run("waits while another revision's manifest is in place, and bootstrap has nothing to fall back to", func(t *testing.T) {
		l := revisions.ForDataDir(t.TempDir(), "kube-apiserver")
		install(t, l, 1, manifest(1, ""))
		// An older monitor's manifest left behind, for revision 7, which is
		// not what the operand runs.
		if err := os.MkdirAll(l.RevisionDir(7), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(l.RevisionManifest(7), manifest(7, ""), 0o600); err != nil {
			t.Fatal(err)
		}
		clk := clocktesting.NewFakeClock(time.Now())
		m := &Monitor{Layout: l, Revision: 7, NodeName: "n1", Timeouts: DefaultTimeouts, Agent: &fakeAgent{}, Server: &fakeServer{}, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		for i := 0; i < 3; i++ {
			clk.Step(10 * time.Minute)
			if v, done, err := m.Step(context.Background()); done || err != nil || v.Action != Wait {
				t.Fatalf("%v %v %v", v, done, err)
			}
		}
		// Revision 1 never starts; nothing earlier exists: it is left alone.
		m1 := &Monitor{Layout: l, Revision: 1, NodeName: "n1", Timeouts: DefaultTimeouts, Agent: &fakeAgent{}, Server: &fakeServer{}, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		m1.Step(context.Background())
		clk.Step(time.Minute)
		v, _, err := m1.Step(context.Background())
		if err != nil || v.Reason != fallback.NeverStartedUp {
			t.Fatalf("%v %v", v, err)
		}
		if got := mustRead(t, l.OperandManifest()); string(got) != string(manifest(1, "")) {
			t.Errorf("bootstrap revision replaced: %s", got)
		}
	})
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Clean(p))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
