package podworker

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	"github.com/steadyplane/steadyplane/pkg/node/kubeletapi"
	"github.com/steadyplane/steadyplane/pkg/node/localstatus"
	"github.com/steadyplane/steadyplane/pkg/node/probe"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// container is the agent's state of one container of a pod: its lifecycle
// (changed by transition only), its current run and its probes.
type container struct {
	spec corev1.Container
	lifecycle
	run     runtime.Container // the current run: in phases Running and Killing only
	runSpec *runtime.ContainerConfig
	// running are the resources the current run has (in-place resize
	// changes them); spec.Resources are those allocated to the container.
	running   *corev1.ResourceRequirements
	image     *pulledImage // the image of the current or last run; nil for a host root
	readiness *probe.Tracker
	liveness  *probe.Tracker
	startup   *probe.Tracker
	// reported is what the previous agent said of the run this one
	// adopted; the probes resume from it (nil for a run of this agent's).
	reported     *reportedVerdicts
	probesCancel context.CancelFunc
	// target is the container whose PID namespace an ephemeral container
	// joins ("" for its own).
	target string
}

// worker runs one pod: its containers as processes, its probes, and its
// status in the API. Everything it does happens in sync, called from its own
// goroutine whenever something changed (the pod in the API, a process, a
// probe) or once a second.
type Worker struct {
	host Host
	node *Node
	key  string
	wake chan struct{}
	mu   sync.Mutex
	pod  *corev1.Pod // the latest version the API (or the manifest) gave
	// asked, under mu, is the agent's most pressing request: the pod gone
	// from the API, retired, or evicted (podSync for none).
	asked podEvent
	// life is the pod's state on the node (podTransition); only Run's
	// goroutine touches it.
	life podLife
	// finished is closed when the worker has stopped its containers.
	finished chan struct{}
	// static pods run from a manifest; their status goes to the mirror pod.
	static bool

	containers []*container // init containers first, then containers, then ephemeral ones, in order
	setup      podSetup
	startTime  metav1.Time
	lastSynced string
	// setupErr is the last error making the pod's sandbox, network or
	// volumes, so that an event is sent once per reason.
	setupErr string
	// initialized: the pod's init containers that must end succeeded and its
	// sidecars started, and a regular container ran; it stays so.
	initialized bool
	// sidecarsEnded: the regular containers ended for good and the sidecars
	// were stopped with them; they do not run again.
	sidecarsEnded bool
	// resizing is the in-place resize of the pod under way or waiting.
	resizing resizeState
	// allocated, under mu, is the version of the pod whose resources its
	// containers were given (at admission, then by each resize allocated):
	// what other pods' admission and resizes count of it, so that a
	// resize still waiting counts for nothing.
	allocated *corev1.Pod
	// storageAt is when the pod's local storage was last measured.
	storageAt time.Time
	// local is the status last kept in the node's own record.
	local corev1.PodStatus
	// previous and attempts are what a previous agent recorded of the
	// containers, for ephemeral ones added later.
	previous map[string]corev1.ContainerStatus
	attempts map[string]int32
	// view and netns are what the node API sees of the pod, under mu.
	view  map[string]*kubeletapi.Container
	netns string
	// write sends the pod's status to the API: writeStatus, or what a test
	// records.
	write func(ctx context.Context, pod *corev1.Pod)
	// writes ends when the pod is retired or deleted: a status write in
	// flight then gives up instead of holding up the stop.
	writes     context.Context
	stopWrites context.CancelFunc
	// hooks ends when the pod starts terminating (deleted, gracefully or
	// not, or retired): a postStart hook under way gives up then.
	hooks    context.Context
	endHooks context.CancelFunc
}

// statusWriteTimeout bounds one status write. Our clients send
// X-Kubernetes-If-Ready, so an API server that is not ready answers 503 with
// Retry-After and client-go retries for up to ~50s; the mirror pod of the
// very API server that does not become ready is written to that server.
const statusWriteTimeout = 10 * time.Second

// newWorker returns the worker of pod on node n, whose agent is h.
func newWorker(h Host, n *Node, pod *corev1.Pod, static bool) *Worker {
	w := &Worker{host: h, node: n, key: podKey(pod), wake: make(chan struct{}, 1), pod: pod, allocated: pod, static: static, startTime: metav1.Now()}
	w.write = w.writeStatus
	w.writes, w.stopWrites = context.WithCancel(context.Background())
	w.hooks, w.endHooks = context.WithCancel(context.Background())
	w.finished = make(chan struct{})
	// An agent restart keeps counting: from the node's own record first
	// (a static pod has no other while the API server is away), else from
	// the status a previous agent wrote to the API.
	previous := map[string]corev1.ContainerStatus{}
	for _, s := range allStatuses(pod.Status) {
		previous[s.Name] = s
	}
	var attempts, kills map[string]int32
	var allocated map[string]corev1.ResourceRequirements
	rec, err := localstatus.Read(w.podDir(pod))
	if err != nil {
		klog.ErrorS(err, "Ignoring the pod's local record", "pod", klog.KObj(pod))
	}
	if rec != nil && rec.UID == pod.UID {
		w.local = rec.Status
		attempts, kills, allocated = rec.StartAttempts, rec.LivenessKills, rec.Allocated
		if rec.Status.StartTime != nil {
			w.startTime = *rec.Status.StartTime
		}
		for _, s := range allStatuses(rec.Status) {
			if p, ok := previous[s.Name]; !ok || s.RestartCount >= p.RestartCount {
				previous[s.Name] = s
			}
		}
	}
	for _, c := range pod.Spec.InitContainers {
		ic := &container{spec: c, lifecycle: lifecycle{name: c.Name, init: true, sidecar: podutil.IsRestartableInitContainer(&c), postStart: hasPostStart(&c),
			restarts: previous[c.Name].RestartCount, startAttempts: attempts[c.Name], livenessKills: kills[c.Name],
			done: finishedForGood(pod, previous[c.Name], true)}}
		if ic.sidecar {
			ic.readiness, ic.liveness, ic.startup = newTrackers()
		}
		w.containers = append(w.containers, ic)
	}
	if len(allocated) > 0 {
		// What a previous agent allocated, not what the spec asks now: a
		// resize it had not allocated is decided again.
		w.allocated = pod.DeepCopy()
		for i, c := range w.allocated.Spec.Containers {
			if r, ok := allocated[c.Name]; ok {
				w.allocated.Spec.Containers[i].Resources = r
			}
		}
	}
	for _, c := range w.allocated.Spec.Containers {
		rc := &container{spec: c, lifecycle: lifecycle{name: c.Name, postStart: hasPostStart(&c),
			restarts: previous[c.Name].RestartCount, startAttempts: attempts[c.Name], livenessKills: kills[c.Name],
			done: finishedForGood(pod, previous[c.Name], false)}}
		rc.readiness, rc.liveness, rc.startup = newTrackers()
		w.containers = append(w.containers, rc)
	}
	w.previous, w.attempts = previous, attempts
	w.addEphemeral(pod)
	// As the kubelet: a pod one of whose regular containers ran was
	// initialized, and its sidecars restart without holding it back; once
	// they all ended for good, the sidecars ended with them.
	w.initialized = slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool {
		p := previous[c.Name]
		return p.State.Running != nil || p.State.Terminated != nil || p.RestartCount > 0 || p.LastTerminationState.Terminated != nil
	})
	if w.terminal() {
		// The sidecars of a pod that ended keep the ends a previous agent
		// reported; sync stops any run of theirs that goes on.
		for _, c := range w.containers {
			if t := previous[c.name].State.Terminated; c.sidecar && t != nil {
				c.done = t.DeepCopy()
			}
		}
	}
	return w
}

// hasPostStart says whether c has a postStart hook.
func hasPostStart(c *corev1.Container) bool {
	return c.Lifecycle != nil && c.Lifecycle.PostStart != nil
}

// allStatuses are s's container statuses of every kind.
func allStatuses(s corev1.PodStatus) []corev1.ContainerStatus {
	return slices.Concat(s.InitContainerStatuses, s.ContainerStatuses, s.EphemeralContainerStatuses)
}

// addEphemeral adds the ephemeral containers of pod the worker does not
// run yet: kubectl debug adds them to a running pod. One that a previous
// agent reported ended is not run again.
func (w *Worker) addEphemeral(pod *corev1.Pod) {
	for _, ec := range pod.Spec.EphemeralContainers {
		if slices.ContainsFunc(w.containers, func(c *container) bool { return c.spec.Name == ec.Name }) {
			continue
		}
		prev := w.previous[ec.Name]
		var done *corev1.ContainerStateTerminated
		if t := prev.State.Terminated; t != nil {
			done = t.DeepCopy()
		}
		e := &container{spec: corev1.Container(ec.EphemeralContainerCommon), target: ec.TargetContainerName,
			lifecycle: lifecycle{name: ec.Name, ephemeral: true, restarts: prev.RestartCount, startAttempts: w.attempts[ec.Name], done: done}}
		// The API refuses probes on ephemeral containers: trackers that
		// never hear of one pass.
		e.readiness, e.liveness, e.startup = newTrackers()
		w.containers = append(w.containers, e)
	}
}

// finishedForGood returns the terminated state of a container that a
// previous agent reported finished and that its restart policy does not run
// again (a RestartPolicy Never container, one that succeeded under
// OnFailure, an init container that completed), or nil: a new agent must not
// run it again.
func finishedForGood(pod *corev1.Pod, s corev1.ContainerStatus, init bool) *corev1.ContainerStateTerminated {
	t := s.State.Terminated
	if t == nil {
		return nil
	}
	if !shouldRestart(pod, s.Name, init, t.ExitCode) {
		return t.DeepCopy()
	}
	return nil
}

func (w *Worker) podDir(pod *corev1.Pod) string {
	return filepath.Join(w.node.RootDir, "pods", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}

// podKey is pod's namespace/name.
func podKey(pod *corev1.Pod) string {
	return types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}.String()
}
