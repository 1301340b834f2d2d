package integration

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/internal/testenv"
)

// hookCalls records the HTTP hooks the node agent calls on a server on
// 127.0.0.1 (the agent calls HTTP hooks from the node, as the kubelet).
type hookCalls struct {
	mu    sync.Mutex
	paths []string
	port  int
}

func newHookServer(t *testing.T) *hookCalls {
	t.Helper()
	h := &hookCalls{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.port = l.Addr().(*net.TCPAddr).Port
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.paths = append(h.paths, r.URL.Path)
		h.mu.Unlock()
	})}
	go srv.Serve(l) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })
	return h
}

func (h *hookCalls) called(path string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.paths {
		if p == path {
			return true
		}
	}
	return false
}

// hookAt is an HTTP hook that calls path on the test's server.
func (h *hookCalls) hookAt(path string) *corev1.LifecycleHandler {
	return &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Host: "127.0.0.1", Port: intstr.FromInt32(int32(h.port)), Path: path}}
}

// TestSidecarsAndHooks runs, on runc, what the kubelet's users write for
// sidecars and hooks: an init container, then a sidecar whose postStart hook
// and startup probe hold the regular container back until it is up, then the
// regular container, which sees what the sidecar made. When the regular
// container ends (restartPolicy Never) the sidecar is stopped, its preStop
// hook called, and the pod Succeeded. On deletion of a pod that runs on, the
// regular container's preStop hook runs first and the sidecar stops after
// the regular container.
func TestSidecarsAndHooks(t *testing.T) {
	ctx, _, o, _, cs := startNode(t)
	hooks := newHookServer(t)
	pods := cs.CoreV1().Pods("default")
	shared := []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
	sidecar := corev1.Container{Name: "proxy", Image: "local/host", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), VolumeMounts: shared,
		Command: []string{"sh", "-c", `trap 'exit 0' TERM; sleep 1; echo up > /shared/proxy; while :; do sleep 0.2; done`},
		StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/shared/proxy"}}},
			PeriodSeconds: 1, FailureThreshold: 30},
		Lifecycle: &corev1.Lifecycle{
			PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo hooked > /shared/poststart"}}},
			PreStop:   hooks.hookAt("/proxy-prestop"),
		}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "with-sidecar"}, Spec: corev1.PodSpec{
		RuntimeClassName: testenv.HostRoot(), NodeName: o.NodeName, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: ptr.To[int64](10),
		Volumes: []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		InitContainers: []corev1.Container{
			{Name: "setup", Image: "local/host", Command: []string{"sh", "-c", "echo ready > /shared/setup"}, VolumeMounts: shared},
			sidecar,
		},
		Containers: []corev1.Container{{Name: "app", Image: "local/host", VolumeMounts: shared,
			Command: []string{"sh", "-c", "cat /shared/setup /shared/poststart /shared/proxy"}}},
	}}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *corev1.Pod
	waitFor(ctx, t, 90*time.Second, "the pod Succeeded with its sidecar stopped", func() (bool, string) {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		last = p
		var sc corev1.ContainerStatus
		if len(p.Status.InitContainerStatuses) == 2 {
			sc = p.Status.InitContainerStatuses[1]
		}
		return p.Status.Phase == corev1.PodSucceeded && sc.State.Terminated != nil, fmt.Sprintf("%s, sidecar %+v", p.Status.Phase, sc.State)
	})
	if got := lastLogLine(ctx, t, cs, pod.Name, "app"); got != "up" {
		t.Errorf("the app's last line %q, want what the sidecar wrote (it ran before the sidecar started)", got)
	}
	if !hooks.called("/proxy-prestop") {
		t.Errorf("the sidecar's preStop hook was not called when the pod ended")
	}
	for _, c := range last.Status.Conditions {
		if c.Type == corev1.PodInitialized && c.Status != corev1.ConditionTrue {
			t.Errorf("Initialized %s after the pod ran", c.Status)
		}
	}

	// Deletion: the app's preStop hook (a 2 s sleep) runs first, the sidecar
	// stops after the app.
	pod2 := pod.DeepCopy()
	pod2.Name, pod2.ResourceVersion = "runs-on", ""
	pod2.Spec.RestartPolicy = corev1.RestartPolicyAlways
	pod2.Spec.InitContainers[1].Lifecycle.PreStop = hooks.hookAt("/proxy-prestop-2")
	pod2.Spec.Containers[0].Command = []string{"sh", "-c", `trap 'exit 0' TERM; while :; do sleep 0.2; done`}
	pod2.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 2}}}
	if _, err := pods.Create(ctx, pod2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 90*time.Second, "the second pod Ready", func() (bool, string) {
		p, err := pods.Get(ctx, pod2.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue, c.Message
			}
		}
		return false, string(p.Status.Phase)
	})
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod2.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	deleted := time.Now()
	if err := pods.Delete(ctx, pod2.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var app, proxy *corev1.ContainerStateTerminated
	timeout := time.After(60 * time.Second)
	for app == nil || proxy == nil {
		select {
		case ev := <-w.ResultChan():
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			if len(p.Status.ContainerStatuses) == 1 && len(p.Status.InitContainerStatuses) == 2 {
				app, proxy = p.Status.ContainerStatuses[0].State.Terminated, p.Status.InitContainerStatuses[1].State.Terminated
			}
		case <-timeout:
			t.Fatalf("no status with both containers terminated within 60s of the deletion")
		}
	}
	// The sidecar stops once the app ended, well within the grace period.
	if proxy.FinishedAt.Before(&app.FinishedAt) || proxy.FinishedAt.Time.Sub(deleted.Truncate(time.Second)) < time.Second ||
		proxy.FinishedAt.Time.Sub(app.FinishedAt.Time) > 3*time.Second {
		t.Errorf("the sidecar finished at %v, the app at %v, deleted at %v: want the sidecar within seconds after the app, which slept 2s in its preStop hook",
			proxy.FinishedAt, app.FinishedAt, deleted)
	}
	if !hooks.called("/proxy-prestop-2") {
		t.Errorf("the sidecar's preStop hook was not called on deletion")
	}
	t.Logf("deleted at %s; app finished %s (exit %d), sidecar %s (exit %d)", deleted.Format(time.RFC3339Nano),
		app.FinishedAt.Format(time.RFC3339), app.ExitCode, proxy.FinishedAt.Format(time.RFC3339), proxy.ExitCode)
}
