package podworker

import (
	"context"
	"slices"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/node/kubeletapi"
	"github.com/steadyplane/steadyplane/pkg/node/localstatus"
	"github.com/steadyplane/steadyplane/pkg/node/podstatus"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// terminatedState is how the Pod API shows run id that ended with exit,
// with message as its termination message.
func terminatedState(id string, exit runtime.Exit, message string) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{
		ExitCode: exit.ExitCode, Reason: terminatedReason(exit), Signal: signalNumber(exit),
		StartedAt: metav1.NewTime(exit.StartedAt), FinishedAt: metav1.NewTime(exit.FinishedAt),
		Message: message, ContainerID: id,
	}
}

// signalNumber is the number of the signal that ended a run, 0 for none.
func signalNumber(exit runtime.Exit) int32 {
	if exit.Signal == "" {
		return 0
	}
	return int32(unix.SignalNum(exit.Signal))
}

// recordLocal keeps the pod's status, as the agent computes it, in the
// node's own record; conditions keep their transition times from the
// previous record.
func (w *Worker) recordLocal(pod *corev1.Pod) {
	base := pod.DeepCopy()
	base.Status = w.local
	s := w.status(base)
	rec := &localstatus.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Static: w.static, Annotations: pod.Annotations,
		Status: s, StartAttempts: map[string]int32{}}
	for _, c := range w.containers {
		rec.StartAttempts[c.spec.Name] = c.startAttempts
		if !c.init && !c.ephemeral {
			if rec.Allocated == nil {
				rec.Allocated = map[string]corev1.ResourceRequirements{}
			}
			rec.Allocated[c.spec.Name] = c.spec.Resources
		}
		if c.livenessKills > 0 {
			if rec.LivenessKills == nil {
				rec.LivenessKills = map[string]int32{}
			}
			rec.LivenessKills[c.spec.Name] = c.livenessKills
		}
	}
	w.publish(pod, s)
	if err := w.node.Local.Put(w.podDir(pod), rec); err != nil {
		klog.ErrorS(err, "Writing the pod's local record", "pod", klog.KObj(pod))
		return
	}
	w.local = s
}

// publish makes the pod's containers, as of status s, reachable from the
// node API's goroutines, which may not touch the worker's own fields.
func (w *Worker) publish(pod *corev1.Pod, s corev1.PodStatus) {
	statuses := map[string]corev1.ContainerStatus{}
	for _, cs := range allStatuses(s) {
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

// containerStatus reports c as the Pod API shows it.
func (w *Worker) containerStatus(c *container) corev1.ContainerStatus {
	s := corev1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, RestartCount: c.restarts}
	// As the kubelet's: the requests allocated to the container, and the
	// resources its run has (which an in-place resize changes once it is
	// applied; clients of resize wait for the two to agree).
	if len(c.spec.Resources.Requests) > 0 {
		s.AllocatedResources = c.spec.Resources.Requests.DeepCopy()
	}
	switch r := c.spec.Resources; {
	case c.running != nil && c.state() == stateRunning:
		s.Resources = c.running.DeepCopy()
	case len(r.Limits) > 0 || len(r.Requests) > 0:
		s.Resources = &corev1.ResourceRequirements{Limits: r.Limits.DeepCopy(), Requests: r.Requests.DeepCopy()}
	}
	if c.image != nil {
		// As the kubelet shows them: the image's full name and its content.
		s.Image, s.ImageID = c.image.name, c.image.ref()
	}
	if c.last != nil {
		s.LastTerminationState.Terminated = c.last
	}
	switch c.state() {
	case stateRunning:
		s.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.run.StartedAt())}
		s.ContainerID = c.run.ID()
		switch {
		case c.ephemeral:
			// As the kubelet: started, never ready.
			started := true
			s.Started = &started
		case c.probed():
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
		s.Ready = c.init && !c.sidecar && c.done.ExitCode == 0
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
func (w *Worker) status(pod *corev1.Pod) corev1.PodStatus {
	var initStatuses, statuses, ephemeralStatuses []corev1.ContainerStatus
	for _, c := range w.containers {
		switch {
		case c.init:
			initStatuses = append(initStatuses, w.containerStatus(c))
		case c.ephemeral:
			ephemeralStatuses = append(ephemeralStatuses, w.containerStatus(c))
		default:
			statuses = append(statuses, w.containerStatus(c))
		}
	}
	old := pod.Status
	s := *old.DeepCopy()
	s.Phase = podstatus.Phase(pod, initStatuses, statuses, w.initialized)
	s.InitContainerStatuses, s.ContainerStatuses, s.EphemeralContainerStatuses = initStatuses, statuses, ephemeralStatuses
	s.HostIP, s.HostIPs = w.node.IP, []corev1.HostIP{{IP: w.node.IP}}
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
		podstatus.Initialized(pod, initStatuses, statuses, s.Phase),
		podstatus.ContainersReady(pod, initStatuses, statuses, s.Phase),
		podstatus.Ready(pod, old.Conditions, initStatuses, statuses, s.Phase),
	}
	for i := range owned {
		owned[i].ObservedGeneration = pod.Generation
	}
	owned = append(owned, w.resizing.conditions()...)
	owned = podstatus.WithTransitionTimes(owned, old.Conditions, metav1.Now())
	conditions := make([]corev1.PodCondition, 0, len(old.Conditions)+len(owned))
	for _, c := range old.Conditions {
		if !podstatus.IsOwned(c.Type) {
			conditions = append(conditions, c)
		}
	}
	s.Conditions = append(owned, conditions...)
	s.Message, s.Reason = "", ""
	if l := w.life; l.state == podEnded {
		s.Phase, s.Reason, s.Message = corev1.PodFailed, l.reason, l.message
		if l.reason == ReasonEvicted && !slices.ContainsFunc(s.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.DisruptionTarget }) {
			s.Conditions = append(s.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: "TerminationByKubelet", Message: l.message, LastTransitionTime: metav1.Now()})
		}
	}
	s.ObservedGeneration = pod.Generation
	return s
}

// writeStatus PATCHes the status subresource with what changed: a two-way
// strategic merge patch between the pod as last seen and that pod with the
// agent's fields replaced, with a UID precondition (upstream's PatchPodStatus).
// Conditions written by others are in neither side of the diff's changes, so
// they are never touched; nothing is sent when nothing changed.
func (w *Worker) writeStatus(ctx context.Context, pod *corev1.Pod) {
	ctx, cancel := context.WithTimeout(ctx, statusWriteTimeout)
	defer cancel()
	if w.writes != nil {
		defer context.AfterFunc(w.writes, cancel)()
	}
	patch, unchanged, err := w.host.PatchStatus(ctx, pod, w.status)
	if err != nil {
		if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			klog.ErrorS(err, "Writing pod status", "pod", klog.KObj(pod))
		}
		return
	}
	if !unchanged {
		klog.V(4).InfoS("Pod status written", "pod", klog.KObj(pod), "patch", string(patch))
		statusWrites.Inc()
	}
}
