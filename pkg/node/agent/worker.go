package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	podutil "k8s.io/kubernetes/pkg/util/pod"

	"github.com/steadyplane/steadyplane/pkg/node/kubeletapi"
	"github.com/steadyplane/steadyplane/pkg/node/localstatus"
	"github.com/steadyplane/steadyplane/pkg/node/podstatus"
	"github.com/steadyplane/steadyplane/pkg/node/probe"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// container is the agent's state of one container of a pod.
type container struct {
	spec     corev1.Container
	init     bool
	run      runtime.Container // the current run; nil between runs
	runSpec  *runtime.ContainerConfig
	restarts int32
	// startAttempts counts every attempt to start the container, failed
	// ones included; kept in the local record across agent restarts.
	startAttempts int32
	// livenessKills counts the runs stopped for a failed liveness probe
	// (kept in the local record too).
	livenessKills int32
	backoff       time.Duration
	notBefore     time.Time // no restart before this (crash-loop backoff)
	last          *corev1.ContainerStateTerminated
	done          *corev1.ContainerStateTerminated // exited for good
	waiting       *corev1.ContainerStateWaiting
	readiness     *probe.Tracker
	liveness      *probe.Tracker
	startup       *probe.Tracker
	probesCancel  context.CancelFunc
	// killing is set while a liveness failure stops the container: the
	// worker goes on with the pod's other containers meanwhile.
	killing bool
	// checkedLeftover is set once a run left by a previous agent has
	// been looked for.
	checkedLeftover bool
}

// containerState is where a container is in its lifecycle, as the Pod API
// shows it: waiting (to be created, or to restart after a crash, with a
// reason), running (a run is under way), or terminated (ended for good under
// the pod's restart policy).
type containerState int

const (
	stateWaiting containerState = iota
	stateRunning
	stateTerminated
)

// state derives c's lifecycle state from its current run and its end.
func (c *container) state() containerState {
	switch {
	case c.run != nil:
		return stateRunning
	case c.done != nil:
		return stateTerminated
	}
	return stateWaiting
}

// worker runs one pod: its containers as processes, its probes, and its
// status in the API. Everything it does happens in sync, called from its own
// goroutine whenever something changed (the pod in the API, a process, a
// probe) or once a second.
type worker struct {
	a    *Agent
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

	containers []*container // init containers first, in order
	setup      podSetup
	startTime  metav1.Time
	lastSynced string
	// setupErr is the last error making the pod's sandbox, network or
	// volumes, so that an event is sent once per reason.
	setupErr string
	// local is the status last kept in the node's own record.
	local corev1.PodStatus
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
}

// statusWriteTimeout bounds one status write. Our clients send
// X-Kubernetes-If-Ready, so an API server that is not ready answers 503 with
// Retry-After and client-go retries for up to ~50s; the mirror pod of the
// very API server that does not become ready is written to that server.
const statusWriteTimeout = 10 * time.Second

func newWorker(a *Agent, pod *corev1.Pod, static bool) *worker {
	w := &worker{a: a, key: pod.Namespace + "/" + pod.Name, wake: make(chan struct{}, 1), pod: pod, static: static, startTime: metav1.Now()}
	w.write = w.writeStatus
	w.writes, w.stopWrites = context.WithCancel(context.Background())
	w.finished = make(chan struct{})
	// An agent restart keeps counting: from the node's own record first
	// (a static pod has no other while the API server is away), else from
	// the status a previous agent wrote to the API.
	previous := map[string]corev1.ContainerStatus{}
	for _, s := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		previous[s.Name] = s
	}
	var attempts, kills map[string]int32
	rec, err := localstatus.Read(w.podDir(pod))
	if err != nil {
		klog.ErrorS(err, "Ignoring the pod's local record", "pod", klog.KObj(pod))
	}
	if rec != nil && rec.UID == pod.UID {
		w.local = rec.Status
		attempts, kills = rec.StartAttempts, rec.LivenessKills
		if rec.Status.StartTime != nil {
			w.startTime = *rec.Status.StartTime
		}
		for _, s := range append(append([]corev1.ContainerStatus{}, rec.Status.InitContainerStatuses...), rec.Status.ContainerStatuses...) {
			if p, ok := previous[s.Name]; !ok || s.RestartCount >= p.RestartCount {
				previous[s.Name] = s
			}
		}
	}
	for _, c := range pod.Spec.InitContainers {
		w.containers = append(w.containers, &container{spec: c, init: true, restarts: previous[c.Name].RestartCount, startAttempts: attempts[c.Name],
			done: finishedForGood(pod, previous[c.Name], true)})
	}
	for _, c := range pod.Spec.Containers {
		w.containers = append(w.containers, &container{spec: c, restarts: previous[c.Name].RestartCount, startAttempts: attempts[c.Name], livenessKills: kills[c.Name],
			done:      finishedForGood(pod, previous[c.Name], false),
			readiness: probe.NewTracker(probe.Readiness), liveness: probe.NewTracker(probe.Liveness), startup: probe.NewTracker(probe.Startup)})
	}
	return w
}

// recordLocal keeps the pod's status, as the agent computes it, in the
// node's own record; conditions keep their transition times from the
// previous record.
func (w *worker) recordLocal(pod *corev1.Pod) {
	base := pod.DeepCopy()
	base.Status = w.local
	s := w.status(base)
	rec := &localstatus.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Static: w.static, Annotations: pod.Annotations,
		Status: s, StartAttempts: map[string]int32{}}
	for _, c := range w.containers {
		rec.StartAttempts[c.spec.Name] = c.startAttempts
		if c.livenessKills > 0 {
			if rec.LivenessKills == nil {
				rec.LivenessKills = map[string]int32{}
			}
			rec.LivenessKills[c.spec.Name] = c.livenessKills
		}
	}
	w.publish(pod, s)
	if err := w.a.local.Put(w.podDir(pod), rec); err != nil {
		klog.ErrorS(err, "Writing the pod's local record", "pod", klog.KObj(pod))
		return
	}
	w.local = s
}

// publish makes the pod's containers, as of status s, reachable from the
// node API's goroutines, which may not touch the worker's own fields.
func (w *worker) publish(pod *corev1.Pod, s corev1.PodStatus) {
	statuses := map[string]corev1.ContainerStatus{}
	for _, cs := range append(append([]corev1.ContainerStatus{}, s.InitContainerStatuses...), s.ContainerStatuses...) {
		statuses[cs.Name] = cs
	}
	view := map[string]*kubeletapi.Container{}
	dir := w.podDir(pod)
	for _, c := range w.containers {
		name := c.spec.Name
		v := &kubeletapi.Container{Status: statuses[name], Run: c.run, Dir: c.spec.WorkingDir,
			LogPath: func(run int32) string { return runLogPath(dir, name, run) }}
		if c.runSpec != nil {
			v.Env = c.runSpec.Env
		}
		view[name] = v
	}
	netns := ""
	if sb := w.setup.sandbox; sb != nil {
		netns = sb.NetNS
	}
	w.mu.Lock()
	w.view, w.netns = view, netns
	w.mu.Unlock()
}

// finishedForGood returns the terminated state of a container that a
// previous agent reported finished and that the pod's restart policy does
// not run again (a RestartPolicy Never container, one that succeeded under
// OnFailure, an init container that completed), or nil: a new agent must not
// run it again.
func finishedForGood(pod *corev1.Pod, s corev1.ContainerStatus, init bool) *corev1.ContainerStateTerminated {
	t := s.State.Terminated
	if t == nil {
		return nil
	}
	if init && t.ExitCode == 0 || !ShouldRestart(string(pod.Spec.RestartPolicy), t.ExitCode) {
		return t.DeepCopy()
	}
	return nil
}

// update gives the worker a newer version of its pod.
func (w *worker) update(pod *corev1.Pod) {
	w.mu.Lock()
	w.pod = pod
	w.mu.Unlock()
	w.poke()
}

// retire stops the pod with its grace period; nothing is removed from the
// API (a static pod's mirror is handled with the manifests).
func (w *worker) retire() {
	w.mu.Lock()
	w.retiring = true
	w.mu.Unlock()
	w.endWrites()
	w.poke()
}

func (w *worker) delete() {
	w.mu.Lock()
	w.gone = true
	w.mu.Unlock()
	w.endWrites()
	w.poke()
}

// endWrites abandons a status write in flight: the pod stops now, and a
// static pod's next version writes its own status.
func (w *worker) endWrites() {
	if w.stopWrites != nil {
		w.stopWrites()
	}
}

func (w *worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run drives the pod until it is deleted or ctx ends; it stops every
// container before it returns.
func (w *worker) run(ctx context.Context) {
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
			if w.a.opts.StopPodsOnExit {
				w.stopAll(pod, gracePeriod(pod))
				// Record the ends, so that the next agent knows which
				// containers finished for good; best effort, briefly.
				sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				w.write(sctx, pod)
				cancel()
				if w.a.opts.Runtime.Isolated() {
					// The pod's addresses go back; the next agent makes new ones.
					tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					w.teardownPod(tctx, pod)
					cancel()
				}
				// The record stays: the next agent continues its counts
				// and does not run again what finished for good.
				w.a.local.Forget(pod.UID)
				w.recordLocal(pod)
			}
			return
		}
		if pod.DeletionTimestamp != nil {
			w.terminate(ctx, pod)
			return
		}
		w.sync(ctx, pod, time.Now())
		select {
		case <-ctx.Done():
		case <-w.wake:
		case <-t.C:
		}
	}
}

func (w *worker) podDir(pod *corev1.Pod) string {
	return filepath.Join(w.a.opts.RootDir, "pods", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}

// logPath is where the current run of container c of pod logs to.
func (w *worker) logPath(pod *corev1.Pod, c *container) string {
	return runLogPath(w.podDir(pod), c.spec.Name, c.restarts)
}

// runLogPath is where run number run of container name logs to.
func runLogPath(podDir, name string, run int32) string {
	return filepath.Join(podDir, name, strconv.Itoa(int(run))+".log")
}

// sync brings the containers one step towards what the pod asks at time
// now, then writes the status if it changed and keeps it in the local record.
func (w *worker) sync(ctx context.Context, pod *corev1.Pod, now time.Time) {
	if err := w.setupPod(ctx, pod, now); err != nil {
		w.podNotReady(pod, err)
		w.write(ctx, pod)
		w.recordLocal(pod)
		return
	}
	w.setupErr = ""
	initDone := true
	for _, c := range w.containers {
		if c.init {
			if !initDone {
				continue
			}
			if c.done != nil && c.done.ExitCode == 0 {
				continue
			}
			initDone = false
			w.step(ctx, pod, c, now)
			continue
		}
		if !initDone {
			c.waiting = &corev1.ContainerStateWaiting{Reason: ReasonPodInitializing}
			continue
		}
		w.step(ctx, pod, c, now)
	}
	w.write(ctx, pod)
	w.recordLocal(pod)
}

// podNotReady records why the pod's sandbox, network or volumes could not
// be made: an event when the reason changes, and every container not yet
// running waits with it (ContainerCreating, or CreateContainerConfigError for
// a pod this node cannot run). Setup is tried again on the next sync.
func (w *worker) podNotReady(pod *corev1.Pod, err error) {
	reason := ReasonContainerCreating
	if errors.Is(err, errConfig) {
		reason = ReasonCreateContainerConfigError
	}
	if w.setupErr != err.Error() {
		w.setupErr = err.Error()
		eventReason := "FailedCreatePodSandBox"
		if reason == ReasonCreateContainerConfigError {
			eventReason = "Failed"
		}
		w.a.event(pod, corev1.EventTypeWarning, eventReason, "%v", err)
	}
	for _, c := range w.containers {
		if c.state() == stateWaiting {
			c.waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: err.Error()}
		}
	}
}

// step handles one container: notice an end, restart with backoff, start.
func (w *worker) step(ctx context.Context, pod *corev1.Pod, c *container, now time.Time) {
	if !c.checkedLeftover {
		c.checkedLeftover = true
		w.adopt(ctx, pod, c)
	}
	if c.run != nil {
		select {
		case <-c.run.Done():
		default:
			if !c.init && !c.killing && !w.verdict(c, probe.Liveness) {
				w.a.event(pod, corev1.EventTypeNormal, "Killing", "Container %s failed liveness probe, will be restarted", c.spec.Name)
				c.killing = true
				c.livenessKills++
				w.stopProbes(c)
				// Stopping takes up to the grace period; the end wakes
				// the worker, which restarts the container then.
				go func(r runtime.Container) {
					r.Stop(gracePeriod(pod))
					w.poke()
				}(c.run)
			}
			return
		}
		w.ended(pod, c, now)
	}
	if c.state() == stateTerminated || now.Before(c.notBefore) {
		return
	}
	ip := w.setup.ips[0]
	env, err := containerEnv(pod, &c.spec, ip, w.a.opts.NodeIP)
	var cfg *runtime.ContainerConfig
	if err == nil {
		cfg, err = w.containerConfig(pod, c, env)
	}
	if err == nil {
		c.startAttempts++
		c.run, err = w.a.opts.Runtime.Start(ctx, cfg)
	}
	if err != nil {
		reason := ReasonRunContainerError
		if errors.Is(err, errConfig) {
			reason = ReasonCreateContainerConfigError
		}
		if c.waiting == nil || c.waiting.Message != err.Error() {
			w.a.event(pod, corev1.EventTypeWarning, "Failed", "Error: %v", err)
		}
		c.waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: err.Error()}
		c.notBefore = now.Add(10 * time.Second)
		return
	}
	c.runSpec, c.waiting = cfg, nil
	w.a.event(pod, corev1.EventTypeNormal, "Started", "Started container %s", c.spec.Name)
	if !c.init {
		w.startProbes(ctx, pod, c, env)
	}
}

// adopt takes over the run of c a previous agent left: still running, it
// goes on (no restart); ended while no agent watched, its end is counted
// once.
func (w *worker) adopt(ctx context.Context, pod *corev1.Pod, c *container) {
	cfg := w.containerRef(pod, c)
	run, ok := w.a.opts.Runtime.Adopt(cfg)
	if !ok {
		return
	}
	select {
	case <-run.Done():
		if run.Exit().Run < c.restarts {
			return // an end the previous agent counted already
		}
	default:
		w.a.event(pod, corev1.EventTypeNormal, "Adopted", "Container %s (%s) left running by a previous node agent goes on", c.spec.Name, run.ID())
	}
	c.run, c.runSpec = run, cfg
	cfg.LogPath, cfg.WorkingDir = w.logPath(pod, c), c.spec.WorkingDir
	if env, err := containerEnv(pod, &c.spec, w.setup.ips[0], w.a.opts.NodeIP); err == nil && !c.init {
		cfg.Env = env
		select {
		case <-run.Done():
		default:
			w.startProbes(ctx, pod, c, env)
		}
	}
}

// ended records the end of c's run and decides whether and when it runs again.
func (w *worker) ended(pod *corev1.Pod, c *container, now time.Time) {
	c.killing = false
	exit := c.run.Exit()
	msgPath := c.spec.TerminationMessagePath
	if w.a.opts.Runtime.Isolated() {
		msgPath = terminationLogPath(c.runSpec.Dir, exit.Run)
	}
	message := terminationMessage(&c.spec, msgPath, w.logPath(pod, c), exit.ExitCode)
	if message == "" {
		message = exit.Message
	}
	if w.a.opts.Runtime.Isolated() {
		_ = os.Remove(msgPath)
	}
	term := &corev1.ContainerStateTerminated{
		ExitCode: exit.ExitCode, Reason: terminatedReason(exit), Signal: signalNumber(exit),
		StartedAt: metav1.NewTime(exit.StartedAt), FinishedAt: metav1.NewTime(exit.FinishedAt),
		Message: message, ContainerID: c.run.ID(),
	}
	if exit.OOMKilled {
		w.a.event(pod, corev1.EventTypeWarning, ReasonOOMKilled, "Container %s was killed for exceeding its memory limit", c.spec.Name)
	}
	ranFor := exit.FinishedAt.Sub(exit.StartedAt)
	c.run = nil
	w.stopProbes(c)
	policy := string(pod.Spec.RestartPolicy)
	if c.init && exit.ExitCode == 0 || !ShouldRestart(policy, exit.ExitCode) {
		c.done, c.waiting, c.last = term, nil, nil
		return
	}
	var delay time.Duration
	delay, c.backoff = RestartDelay(c.backoff, ranFor)
	c.last, c.done = term, nil
	c.notBefore = now.Add(delay)
	c.restarts++
	if delay > 0 {
		c.waiting = &corev1.ContainerStateWaiting{Reason: ReasonCrashLoopBackOff,
			Message: fmt.Sprintf("back-off %v restarting failed container=%s pod=%s_%s(%s)", delay, c.spec.Name, pod.Name, pod.Namespace, pod.UID)}
		w.a.event(pod, corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s", c.spec.Name, pod.Name)
	}
}

// signalNumber is the number of the signal that ended a run, 0 for none.
func signalNumber(exit runtime.Exit) int32 {
	if exit.Signal == "" {
		return 0
	}
	return int32(unix.SignalNum(exit.Signal))
}

// startProbes runs c's probes until the container exits; each result that
// changes a verdict wakes the worker at once.
func (w *worker) startProbes(ctx context.Context, pod *corev1.Pod, c *container, env []string) {
	ctx, cancel := context.WithCancel(ctx)
	c.probesCancel = cancel
	// Probe goroutines of the previous run may still report: trackers are
	// only ever touched under the lock.
	w.mu.Lock()
	c.readiness, c.liveness, c.startup = probe.NewTracker(probe.Readiness), probe.NewTracker(probe.Liveness), probe.NewTracker(probe.Startup)
	w.mu.Unlock()
	spec, run, ip := c.spec, c.run, w.setup.ips[0]
	start := func(kind probe.Kind, p *corev1.Probe, tr *probe.Tracker) {
		if p == nil {
			return
		}
		go func() {
			delay := time.Duration(p.InitialDelaySeconds) * time.Second
			t := time.NewTimer(delay)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				// Liveness and readiness wait for the startup probe.
				if kind != probe.Startup && spec.StartupProbe != nil && !w.verdict(c, probe.Startup) {
					t.Reset(probe.Period(p))
					continue
				}
				ok, msg := probe.Run(ctx, p, ip, &spec, func(argv []string) *exec.Cmd { return run.Command(argv, env, spec.WorkingDir, false) })
				if ctx.Err() != nil {
					return
				}
				if !ok {
					w.a.event(pod, corev1.EventTypeWarning, "Unhealthy", "%s probe failed: %s", kind, msg)
				}
				w.mu.Lock()
				changed := tr.Observe(p, ok)
				w.mu.Unlock()
				if changed {
					w.poke()
				}
				if kind == probe.Startup && tr.Passing() {
					return // a startup probe stops once it succeeded
				}
				t.Reset(probe.Period(p))
			}
		}()
	}
	start(probe.Startup, spec.StartupProbe, c.startup)
	start(probe.Readiness, spec.ReadinessProbe, c.readiness)
	start(probe.Liveness, spec.LivenessProbe, c.liveness)
}

func (w *worker) verdict(c *container, kind probe.Kind) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch kind {
	case probe.Startup:
		return c.startup.Passing()
	case probe.Readiness:
		return c.readiness.Passing()
	}
	return c.liveness.Passing()
}

func (w *worker) stopProbes(c *container) {
	if c.probesCancel != nil {
		c.probesCancel()
		c.probesCancel = nil
	}
}

// containerStatus reports c as the Pod API shows it.
func (w *worker) containerStatus(c *container) corev1.ContainerStatus {
	s := corev1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, RestartCount: c.restarts}
	if c.last != nil {
		s.LastTerminationState.Terminated = c.last
	}
	switch c.state() {
	case stateRunning:
		s.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.run.StartedAt())}
		s.ContainerID = c.run.ID()
		if !c.init {
			w.mu.Lock()
			started := c.spec.StartupProbe == nil || c.startup.Passing()
			s.Started = &started
			s.Ready = started && (c.spec.ReadinessProbe == nil || c.readiness.Passing())
			w.mu.Unlock()
		}
	case stateTerminated:
		s.State.Terminated = c.done
		s.ContainerID = c.done.ContainerID
		f := false
		s.Started = &f
		// As the kubelet: an init container that completed is ready.
		s.Ready = c.init && c.done.ExitCode == 0
	default:
		s.State.Waiting = c.waiting
		if s.State.Waiting == nil {
			reason := ReasonContainerCreating
			if c.init {
				reason = ReasonPodInitializing
			}
			s.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason}
		}
	}
	return s
}

// status computes the pod status the agent owns, on top of old: every
// condition the agent does not own is kept as it is.
func (w *worker) status(pod *corev1.Pod) corev1.PodStatus {
	var initStatuses, statuses []corev1.ContainerStatus
	for _, c := range w.containers {
		if c.init {
			initStatuses = append(initStatuses, w.containerStatus(c))
		} else {
			statuses = append(statuses, w.containerStatus(c))
		}
	}
	old := pod.Status
	s := *old.DeepCopy()
	s.Phase = podstatus.Phase(pod, initStatuses, statuses)
	s.InitContainerStatuses, s.ContainerStatuses = initStatuses, statuses
	s.HostIP, s.HostIPs = w.a.opts.NodeIP, []corev1.HostIP{{IP: w.a.opts.NodeIP}}
	if len(w.setup.ips) > 0 {
		s.PodIP, s.PodIPs = w.setup.ips[0], nil
		for _, ip := range w.setup.ips {
			s.PodIPs = append(s.PodIPs, corev1.PodIP{IP: ip})
		}
	}
	if s.StartTime == nil {
		st := w.startTime
		s.StartTime = &st
	}
	owned := []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		podstatus.Initialized(pod, initStatuses, s.Phase),
		podstatus.ContainersReady(pod, statuses, s.Phase),
		podstatus.Ready(pod, old.Conditions, statuses, s.Phase),
	}
	for i := range owned {
		owned[i].ObservedGeneration = pod.Generation
	}
	owned = podstatus.WithTransitionTimes(owned, old.Conditions, metav1.Now())
	conditions := make([]corev1.PodCondition, 0, len(old.Conditions)+len(owned))
	for _, c := range old.Conditions {
		if !podstatus.IsOwned(c.Type) {
			conditions = append(conditions, c)
		}
	}
	s.Conditions = append(owned, conditions...)
	s.Message, s.Reason = "", ""
	s.ObservedGeneration = pod.Generation
	return s
}

// writeStatus PATCHes the status subresource with what changed: a two-way
// strategic merge patch between the pod as last seen and that pod with the
// agent's fields replaced, with a UID precondition (upstream's PatchPodStatus).
// Conditions written by others are in neither side of the diff's changes, so
// they are never touched; nothing is sent when nothing changed.
func (w *worker) writeStatus(ctx context.Context, pod *corev1.Pod) {
	target := w.a.apiPod(pod)
	if target == nil {
		return
	}
	s := w.status(target)
	ctx, cancel := context.WithTimeout(ctx, statusWriteTimeout)
	defer cancel()
	if w.writes != nil {
		defer context.AfterFunc(w.writes, cancel)()
	}
	written, patch, unchanged, err := podutil.PatchPodStatus(ctx, w.a.client, target.Namespace, target.Name, target.UID, target.Status, s)
	if err == nil && w.static && written != nil { // nil: nothing was sent
		w.a.mirrors.Mutation(written) // the base of the next patch
	}
	if err != nil {
		if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			klog.ErrorS(err, "Writing pod status", "pod", klog.KObj(target))
		}
		return
	}
	if !unchanged {
		klog.V(4).InfoS("Pod status written", "pod", klog.KObj(target), "patch", string(patch))
		statusWrites.Inc()
	}
}

// terminate runs a deletion: stop the containers within the grace period,
// write the final status, then remove the pod for good (grace 0, UID
// precondition), as the kubelet does.
func (w *worker) terminate(ctx context.Context, pod *corev1.Pod) {
	grace := gracePeriod(pod)
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	w.stopAll(pod, grace)
	w.write(ctx, pod)
	w.teardownPod(ctx, pod)
	if w.static {
		return
	}
	zero := int64(0)
	removeUntilGone(ctx, klog.KObj(pod), deleteBackoff, func(ctx context.Context) error {
		return w.a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: metav1.NewUIDPreconditions(string(pod.UID))})
	})
}

// deleteBackoff spaces the attempts to remove a terminated pod: 0.5s
// doubling to 30s, until it is gone or the agent stops.
var deleteBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32}

// removeUntilGone calls del until the pod is gone: done, NotFound, or
// Conflict (another pod of that name, its UID precondition failed). Any other
// error (the API server down, a timeout) is logged and retried with backoff,
// so that a terminated pod never stays in the API with its deletion pending.
func removeUntilGone(ctx context.Context, pod klog.ObjectRef, b wait.Backoff, del func(context.Context) error) {
	retryUntilDone(ctx, b, func(ctx context.Context) bool {
		err := del(ctx)
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return true
		}
		klog.ErrorS(err, "Removing a terminated pod; will retry", "pod", pod)
		deleteRetries.Inc()
		return false
	})
}

func (w *worker) stopAll(pod *corev1.Pod, grace time.Duration) {
	var wg sync.WaitGroup
	for _, c := range w.containers {
		w.stopProbes(c)
		if c.run != nil {
			wg.Add(1)
			go func(r runtime.Container, name string) {
				defer wg.Done()
				select {
				case <-r.Done():
					return
				default:
				}
				w.a.event(pod, corev1.EventTypeNormal, "Killing", "Stopping container %s", name)
				r.Stop(grace)
			}(c.run, c.spec.Name)
		}
	}
	wg.Wait()
	for _, c := range w.containers {
		if c.run != nil {
			exit := c.run.Exit()
			c.done = &corev1.ContainerStateTerminated{ExitCode: exit.ExitCode, Reason: terminatedReason(exit), Signal: signalNumber(exit),
				StartedAt: metav1.NewTime(exit.StartedAt), FinishedAt: metav1.NewTime(exit.FinishedAt), ContainerID: c.run.ID()}
			c.run = nil
		}
	}
}

func gracePeriod(pod *corev1.Pod) time.Duration {
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}
