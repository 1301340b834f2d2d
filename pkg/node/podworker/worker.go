package podworker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	running      *corev1.ResourceRequirements
	image        *pulledImage // the image of the current or last run; nil for a host root
	readiness    *probe.Tracker
	liveness     *probe.Tracker
	startup      *probe.Tracker
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
	gone bool        // deleted from the API
	// retiring: a static pod whose manifest changed or went away stops with
	// its grace period.
	retiring bool
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
	// evicted is why the node evicted the pod ("" while it was not): its
	// containers are stopped for good and it is Failed, Evicted.
	evicted string
	// endReason is the reason of that end: Evicted, or DeadlineExceeded
	// for a pod past its activeDeadlineSeconds.
	endReason string
	// evictRequest, under mu, is why the eviction manager asks for the
	// pod's eviction ("" for no request); the worker evicts at its next turn.
	evictRequest string
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
		ic := &container{spec: c, lifecycle: lifecycle{name: c.Name, init: true, sidecar: podutil.IsRestartableInitContainer(&c),
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
		rc := &container{spec: c, lifecycle: lifecycle{name: c.Name,
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

// update gives the worker a newer version of its pod.
func (w *Worker) Update(pod *corev1.Pod) {
	w.mu.Lock()
	w.pod = pod
	w.mu.Unlock()
	if pod.DeletionTimestamp != nil {
		w.endHooks() // a postStart hook under way must not hold the deletion
	}
	w.Poke()
}

// retire stops the pod with its grace period; nothing is removed from the
// API (a static pod's mirror is handled with the manifests).
func (w *Worker) Retire() {
	w.mu.Lock()
	w.retiring = true
	w.mu.Unlock()
	w.endHooks()
	w.endWrites()
	w.Poke()
}

func (w *Worker) Delete() {
	w.mu.Lock()
	w.gone = true
	w.mu.Unlock()
	w.endHooks()
	w.endWrites()
	w.Poke()
}

// endWrites abandons a status write in flight: the pod stops now, and a
// static pod's next version writes its own status.
func (w *Worker) endWrites() {
	if w.stopWrites != nil {
		w.stopWrites()
	}
}

func (w *Worker) Poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run drives the pod until it is deleted or ctx ends; it stops every
// container before it returns.
func (w *Worker) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		w.mu.Lock()
		pod, gone, retiring := w.pod, w.gone, w.retiring
		w.mu.Unlock()
		if gone {
			w.stopAll(pod, 0)
			w.teardownPod(context.WithoutCancel(ctx), pod)
			return
		}
		if retiring {
			w.stopAll(pod, gracePeriod(pod))
			w.teardownPod(context.WithoutCancel(ctx), pod)
			return
		}
		if ctx.Err() != nil {
			if w.node.StopPodsOnExit {
				w.stopAll(pod, gracePeriod(pod))
				// Record the ends, so that the next agent knows which
				// containers finished for good; best effort, briefly.
				sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				w.write(sctx, pod)
				cancel()
				if w.node.Runtime.Isolated() {
					// The pod's addresses go back; the next agent makes new ones.
					tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					w.teardownPod(tctx, pod)
					cancel()
				}
				// The record stays: the next agent continues its counts
				// and does not run again what finished for good.
				w.node.Local.Forget(pod.UID)
				w.recordLocal(pod)
			}
			return
		}
		if pod.DeletionTimestamp != nil {
			w.terminate(ctx, pod)
			return
		}
		w.mu.Lock()
		request := w.evictRequest
		w.mu.Unlock()
		if request != "" && w.evicted == "" {
			w.evict(ctx, pod, request)
			continue
		}
		if w.evicted != "" {
			// Terminal: nothing runs or is set up again until the pod is
			// deleted (its controller makes another).
			select {
			case <-ctx.Done():
			case <-w.wake:
			}
			continue
		}
		w.sync(ctx, pod, time.Now())
		select {
		case <-ctx.Done():
		case <-w.wake:
		case <-t.C:
		}
	}
}

func (w *Worker) podDir(pod *corev1.Pod) string {
	return filepath.Join(w.node.RootDir, "pods", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}

// logPath is where the current run of container c of pod logs to.
func (w *Worker) logPath(pod *corev1.Pod, c *container) string {
	return runLogPath(w.podDir(pod), c.spec.Name, c.restarts)
}

// pruneRunLogs removes the logs (and rotated logs) of container name's runs
// before run-1: kubectl logs reads the current run and, with --previous,
// the one before; a crash-looping container must not fill the disk with
// the rest. The termination-log files of those runs go too.
func pruneRunLogs(podDir, name string, run int32) {
	entries, err := os.ReadDir(filepath.Join(podDir, name))
	if err != nil {
		return
	}
	for _, e := range entries {
		n := e.Name()
		num := strings.TrimPrefix(n, "termination-log-")
		if i := strings.Index(num, ".log"); i > 0 {
			num = num[:i]
		}
		r, err := strconv.Atoi(num)
		if err != nil || int32(r) >= run-1 {
			continue
		}
		if strings.HasPrefix(n, "termination-log-") || strings.Contains(n, ".log") {
			_ = os.Remove(filepath.Join(podDir, name, n))
		}
	}
}

// runLogPath is where run number run of container name logs to.
func runLogPath(podDir, name string, run int32) string {
	return filepath.Join(podDir, name, strconv.Itoa(int(run))+".log")
}

// sync brings the containers one step towards what the pod asks at time
// now, then writes the status if it changed and keeps it in the local record.
func (w *Worker) sync(ctx context.Context, pod *corev1.Pod, now time.Time) {
	if err := w.setupPod(ctx, pod, now); err != nil {
		w.podNotReady(ctx, pod, err, now)
		w.write(ctx, pod)
		w.recordLocal(pod)
		return
	}
	start := w.startTime.Time
	if pod.Status.StartTime != nil {
		start = pod.Status.StartTime.Time // what the API shows
	}
	if !w.allEnded() && pastActiveDeadline(pod, start, now) {
		w.end(ctx, pod, ReasonDeadlineExceeded, corev1.EventTypeNormal, messageDeadlineExceeded, gracePeriod(pod))
		return
	}
	w.setupErr = ""
	w.addEphemeral(pod)
	w.resize(ctx, pod, now)
	if now.Sub(w.storageAt) >= storageCheckPeriod {
		w.storageAt = now
		if msg := storageViolation(pod, w.storageUsage(pod)); msg != "" {
			w.evict(ctx, pod, msg)
			return
		}
	}
	w.endSidecarsOfTerminal(ctx, pod, now)
	// Init containers run one after the other: one that must end holds the
	// rest back until it succeeded, a sidecar until it started. Once the
	// pod was initialized, only its sidecars run again.
	held := false
	for _, c := range w.containers {
		switch {
		case c.sidecar:
			if held || w.sidecarsEnded {
				continue
			}
			w.step(ctx, pod, c, now)
			held = !w.initialized && !w.sidecarStarted(c)
		case c.init:
			if held || w.initialized || c.done != nil && c.done.ExitCode == 0 {
				continue
			}
			w.step(ctx, pod, c, now)
			// One that has just completed lets the next start now.
			held = c.done == nil || c.done.ExitCode != 0
		case held:
			w.apply(ctx, pod, c, event{kind: evInitPending}, now)
		default:
			w.initialized = true
			w.step(ctx, pod, c, now)
		}
	}
	w.endSidecarsOfTerminal(ctx, pod, now)
	w.write(ctx, pod)
	w.recordLocal(pod)
}

// allEnded reports whether every regular container of the pod ended for
// good: the pod Succeeded or Failed, and its deadline no longer applies.
func (w *Worker) allEnded() bool {
	regular := 0
	for _, c := range w.containers {
		if c.init || c.ephemeral {
			continue
		}
		regular++
		if c.state() != stateTerminated {
			return false
		}
	}
	return regular > 0
}

// sidecarStarted reports whether sidecar c started: running, its postStart
// hook done (it runs within the start) and its startup probe, if any, passed.
func (w *Worker) sidecarStarted(c *container) bool {
	return c.phase == phaseRunning && (c.spec.StartupProbe == nil || w.verdict(c, probe.Startup))
}

// terminal reports whether the pod ended for good: its regular containers
// all ended for good, or an init container that must end failed and may not
// run again. Its sidecars do not run then.
func (w *Worker) terminal() bool {
	if w.allEnded() {
		return true
	}
	return slices.ContainsFunc(w.containers, func(c *container) bool {
		return c.init && !c.sidecar && c.state() == stateTerminated && c.done.ExitCode != 0
	})
}

// endSidecarsOfTerminal stops the pod's sidecars once the pod is terminal,
// in reverse order, as the kubelet does: the pod is then Succeeded or
// Failed by its other containers alone. A sidecar a previous agent left
// running is adopted first, so that it is stopped too.
func (w *Worker) endSidecarsOfTerminal(ctx context.Context, pod *corev1.Pod, now time.Time) {
	if w.sidecarsEnded || !w.terminal() {
		return
	}
	w.sidecarsEnded = true
	var sidecars []*container
	for _, c := range w.containers {
		if !c.sidecar {
			continue
		}
		if c.phase == phaseNew {
			w.adopt(ctx, pod, c, now)
		}
		sidecars = append(sidecars, c)
	}
	if len(sidecars) > 0 {
		klog.V(2).InfoS("Stopping the sidecars of a pod that ended", "pod", klog.KObj(pod), "sidecars", len(sidecars))
		w.stopFor(pod, sidecars, gracePeriod(pod))
	}
}

// podNotReady records why the pod's sandbox, network or volumes could not
// be made: an event when the reason changes, and every container not yet
// running waits with it (ContainerCreating, or CreateContainerConfigError for
// a pod this node cannot run). Setup is tried again on the next sync.
func (w *Worker) podNotReady(ctx context.Context, pod *corev1.Pod, err error, now time.Time) {
	reason := ReasonContainerCreating
	switch {
	case errors.Is(err, errConfig):
		reason = ReasonCreateContainerConfigError
	case imageReason(err) != "":
		// An image volume's image: its pull sent its own events.
		reason = imageReason(err)
		w.setupErr = err.Error()
	}
	if w.setupErr != err.Error() {
		w.setupErr = err.Error()
		eventReason := "FailedCreatePodSandBox"
		if reason == ReasonCreateContainerConfigError {
			eventReason = "Failed"
		}
		w.host.Event(pod, corev1.EventTypeWarning, eventReason, "%v", err)
	}
	for _, c := range w.containers {
		w.apply(ctx, pod, c, event{kind: evSetupFailed, waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: err.Error()}}, now)
	}
}

// step feeds container c what the worker observes of it at now: once, a run
// a previous agent left; then the end of the current run, or a failed
// liveness probe while it goes on; then a sync, which starts it when due.
func (w *Worker) step(ctx context.Context, pod *corev1.Pod, c *container, now time.Time) {
	if c.phase == phaseNew {
		w.adopt(ctx, pod, c, now)
	}
	if c.run != nil {
		select {
		case <-c.run.Done():
			w.ended(ctx, pod, c, now)
		default:
			if c.probed() && c.phase == phaseRunning && !w.verdict(c, probe.Liveness) {
				w.apply(ctx, pod, c, event{kind: evLivenessFailed}, now)
			}
			return
		}
	}
	w.apply(ctx, pod, c, event{kind: evSync}, now)
}

// apply moves c through the transition of ev and does what it asks.
func (w *Worker) apply(ctx context.Context, pod *corev1.Pod, c *container, ev event, now time.Time) {
	var actions []action
	c.lifecycle, actions = transition(c.lifecycle, ev, now)
	for _, a := range actions {
		switch a.kind {
		case actEvent:
			w.host.Event(pod, a.eventType, a.reason, a.format, a.args...)
		case actStart:
			w.start(ctx, pod, c, now)
		case actStartProbes:
			// The environment the run was made with (its ConfigMaps and
			// Secrets read once); a run adopted with an environment that
			// could not be made gets no probes.
			if c.runSpec != nil && c.runSpec.Env != nil {
				w.startProbes(ctx, pod, c, c.runSpec.Env)
			}
		case actStopProbes:
			w.stopProbes(c)
		case actKill:
			// Stopping (the preStop hook included) takes up to the grace
			// period; the end wakes the worker, which restarts the
			// container then.
			stop, deadline := w.stopperOf(pod, c, true), now.Add(killGrace(pod, c))
			go func() {
				stop.stop(deadline, true, nil)
				w.Poke()
			}()
		}
	}
}

// start asks the runtime for a run of c and feeds its answer back.
func (w *Worker) start(ctx context.Context, pod *corev1.Pod, c *container, now time.Time) {
	img, err := w.image(ctx, pod, c)
	var env []string
	var expand func(string) string
	if err == nil {
		env, expand, err = w.env(ctx, pod, c, img)
	}
	var cfg *runtime.ContainerConfig
	if err == nil {
		cfg, err = w.containerConfig(pod, c, env, expand, img)
	}
	if err != nil {
		w.apply(ctx, pod, c, event{kind: evStartFailed, err: err}, now)
		return
	}
	pruneRunLogs(w.podDir(pod), c.spec.Name, c.restarts)
	run, err := w.node.Runtime.Start(ctx, cfg)
	if err != nil {
		w.apply(ctx, pod, c, event{kind: evStartFailed, err: err, attempted: true}, now)
		return
	}
	c.run, c.runSpec, c.image = run, cfg, img
	c.running = c.spec.Resources.DeepCopy()
	w.apply(ctx, pod, c, event{kind: evStarted}, now)
	w.postStart(ctx, pod, c)
}

// adopt looks for the run of c a previous agent left: still running, it
// goes on (no restart); ended while no agent watched, its end is counted
// once.
func (w *Worker) adopt(ctx context.Context, pod *corev1.Pod, c *container, now time.Time) {
	cfg := w.containerRef(pod, c)
	run, ok := w.node.Runtime.Adopt(cfg)
	ev := event{kind: evNoLeftover}
	if ok {
		select {
		case <-run.Done():
			if run.Exit().Run >= c.restarts { // else an end the previous agent counted already
				ev = event{kind: evLeftoverEnded}
			}
		default:
			ev = event{kind: evLeftoverRunning, id: run.ID()}
		}
	}
	if ev.kind != evNoLeftover {
		c.run, c.runSpec, c.running = run, cfg, c.spec.Resources.DeepCopy()
		if !w.hostRoot(pod) && w.node.Images != nil {
			c.image, _ = w.node.Images.present(&c.spec)
		}
		cfg.LogPath, cfg.WorkingDir = w.logPath(pod, c), c.spec.WorkingDir
		if env, _, err := w.env(ctx, pod, c, c.image); err == nil && c.probed() {
			cfg.Env = env
		}
	}
	w.apply(ctx, pod, c, ev, now)
}

// ended reads how c's run ended and feeds it to the lifecycle, which
// decides whether and when it runs again.
func (w *Worker) ended(ctx context.Context, pod *corev1.Pod, c *container, now time.Time) {
	term := w.terminated(pod, c)
	c.run = nil
	w.apply(ctx, pod, c, event{kind: evExited, term: term, pod: pod}, now)
}

// terminated is how c's run ended, as the Pod API shows it: the exit, and
// the container's termination message (or, without one, the runtime's).
func (w *Worker) terminated(pod *corev1.Pod, c *container) *corev1.ContainerStateTerminated {
	exit := c.run.Exit()
	msgPath := c.spec.TerminationMessagePath
	if w.node.Runtime.Isolated() {
		msgPath = terminationLogPath(c.runSpec.Dir, exit.Run)
	}
	message := terminationMessage(&c.spec, msgPath, w.logPath(pod, c), exit.ExitCode)
	if message == "" {
		message = exit.Message
	}
	if w.node.Runtime.Isolated() {
		_ = os.Remove(msgPath)
	}
	return terminatedState(c.run.ID(), exit, message)
}

// podKey is pod's namespace/name.
func podKey(pod *corev1.Pod) string {
	return types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}.String()
}

// pullSecrets returns the pod's image pull secrets that can be read; one
// that cannot is left out with an event, as the kubelet does.
func (w *Worker) pullSecrets(ctx context.Context, pod *corev1.Pod) []corev1.Secret {
	var out []corev1.Secret
	for _, ref := range pod.Spec.ImagePullSecrets {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var s *corev1.Secret
		err := errNoAPI
		if w.node.Volumes != nil {
			s, err = w.node.Volumes.Secret(ctx, pod.Namespace, ref.Name)
		}
		cancel()
		if err != nil {
			w.host.Event(pod, corev1.EventTypeWarning, "FailedToRetrieveImagePullSecret", "Unable to retrieve image pull secret %s/%s; the image pull may not succeed: %v", pod.Namespace, ref.Name, err)
			continue
		}
		out = append(out, *s)
	}
	return out
}

// errNoAPI is why a node without an API reads no Secret.
var errNoAPI = errors.New("this node reads nothing from the API")
