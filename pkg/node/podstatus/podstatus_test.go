package podstatus

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pod(containers []string, gates ...string) *corev1.Pod {
	p := &corev1.Pod{}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
	}
	for _, g := range gates {
		p.Spec.ReadinessGates = append(p.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: corev1.PodConditionType(g)})
	}
	return p
}

func ready(name string, r bool) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, Ready: r, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

func cond(t string, s corev1.ConditionStatus) corev1.PodCondition {
	return corev1.PodCondition{Type: corev1.PodConditionType(t), Status: s}
}

func TestReady(t *testing.T) {
	const g1, g2 = "example.com/feature-1", "example.com/feature-2"
	tests := []struct {
		name       string
		pod        *corev1.Pod
		conditions []corev1.PodCondition
		statuses   []corev1.ContainerStatus
		phase      corev1.PodPhase
		want       corev1.PodCondition
	}{
		{"ready, no gates", pod([]string{"a"}), nil, []corev1.ContainerStatus{ready("a", true)}, corev1.PodRunning,
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		{"container not ready: copies ContainersReady", pod([]string{"a", "b"}, g1), nil, []corev1.ContainerStatus{ready("a", false), ready("b", true)}, corev1.PodRunning,
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: ContainersNotReady, Message: "containers with unready status: [a]"}},
		{"unknown and unready containers", pod([]string{"a", "b", "c"}), nil, []corev1.ContainerStatus{ready("b", false)}, corev1.PodPending,
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: ContainersNotReady, Message: "containers with unknown status: [a c], containers with unready status: [b]"}},
		{"gate missing", pod([]string{"a"}, g1), nil, []corev1.ContainerStatus{ready("a", true)}, corev1.PodRunning,
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: ReadinessGatesNotReady, Message: `corresponding condition of pod readiness gate "example.com/feature-1" does not exist.`}},
		{"gate False", pod([]string{"a"}, g1), []corev1.PodCondition{cond(g1, corev1.ConditionFalse)}, []corev1.ContainerStatus{ready("a", true)}, corev1.PodRunning,
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: ReadinessGatesNotReady, Message: `the status of pod readiness gate "example.com/feature-1" is not "True", but False`}},
		{"gate Unknown", pod([]string{"a"}, g1), []corev1.PodCondition{cond(g1, corev1.ConditionUnknown)}, []corev1.ContainerStatus{ready("a", true)}, corev1.PodRunning,
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: ReadinessGatesNotReady, Message: `the status of pod readiness gate "example.com/feature-1" is not "True", but Unknown`}},
		{"two gates, both failing, joined", pod([]string{"a"}, g1, g2), []corev1.PodCondition{cond(g2, corev1.ConditionFalse)}, []corev1.ContainerStatus{ready("a", true)}, corev1.PodRunning,
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: ReadinessGatesNotReady,
				Message: `corresponding condition of pod readiness gate "example.com/feature-1" does not exist., the status of pod readiness gate "example.com/feature-2" is not "True", but False`}},
		{"one of two gates True", pod([]string{"a"}, g1, g2), []corev1.PodCondition{cond(g1, corev1.ConditionTrue), cond(g2, corev1.ConditionFalse)}, []corev1.ContainerStatus{ready("a", true)}, corev1.PodRunning,
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: ReadinessGatesNotReady, Message: `the status of pod readiness gate "example.com/feature-2" is not "True", but False`}},
		{"both gates True", pod([]string{"a"}, g1, g2), []corev1.PodCondition{cond(g1, corev1.ConditionTrue), cond(g2, corev1.ConditionTrue)}, []corev1.ContainerStatus{ready("a", true)}, corev1.PodRunning,
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		{"gates True but container unready: containers win", pod([]string{"a"}, g1), []corev1.PodCondition{cond(g1, corev1.ConditionTrue)}, []corev1.ContainerStatus{ready("a", false)}, corev1.PodRunning,
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: ContainersNotReady, Message: "containers with unready status: [a]"}},
		{"succeeded", pod([]string{"a"}), nil, nil, corev1.PodSucceeded,
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: PodCompleted}},
		{"failed", pod([]string{"a"}, g1), nil, nil, corev1.PodFailed,
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: PodFailed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Ready(tt.pod, tt.conditions, nil, tt.statuses, tt.phase); got != tt.want {
				t.Errorf("Ready =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

func terminated(name string, code int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
}

func TestInitialized(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i1"}, {Name: "i2"}}}}
	tests := []struct {
		name     string
		statuses []corev1.ContainerStatus
		phase    corev1.PodPhase
		want     corev1.PodCondition
	}{
		{"none started", nil, corev1.PodPending, corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionFalse, Reason: ContainersNotInitialized, Message: "containers with unknown status: [i1 i2]"}},
		{"first done, second failed", []corev1.ContainerStatus{terminated("i1", 0), terminated("i2", 1)}, corev1.PodPending,
			corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionFalse, Reason: ContainersNotInitialized, Message: "containers with incomplete status: [i2]"}},
		{"all done", []corev1.ContainerStatus{terminated("i1", 0), terminated("i2", 0)}, corev1.PodRunning, corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}},
		{"succeeded pod", nil, corev1.PodSucceeded, corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, Reason: PodCompleted}},
	}
	for _, tt := range tests {
		if got := Initialized(p, tt.statuses, nil, tt.phase); got != tt.want {
			t.Errorf("%s: Initialized = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// sidecarPod has init container "i" that must end, sidecar "s" and regular
// container "a", under restart policy p.
func sidecarPod(p corev1.RestartPolicy) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	pd := pod([]string{"a"})
	pd.Spec.RestartPolicy = p
	pd.Spec.InitContainers = []corev1.Container{{Name: "i"}, {Name: "s", RestartPolicy: &always}}
	return pd
}

// sidecar is the status of a running sidecar, started or not, ready or not.
func sidecar(started, isReady bool) corev1.ContainerStatus {
	s := ready("s", isReady)
	s.Started = &started
	return s
}

// TestSidecarConditions: sidecars count for Initialized once started, and
// for ContainersReady and Ready as the regular containers do.
func TestSidecarConditions(t *testing.T) {
	p := sidecarPod(corev1.RestartPolicyAlways)
	waiting := corev1.ContainerStatus{Name: "a", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}
	tests := []struct {
		name                         string
		init, main                   []corev1.ContainerStatus
		initialized, containersReady corev1.ConditionStatus
		message                      string
	}{
		{"sidecar not started", []corev1.ContainerStatus{terminated("i", 0), sidecar(false, false)}, []corev1.ContainerStatus{waiting},
			corev1.ConditionFalse, corev1.ConditionFalse, "containers with unready status: [s a]"},
		{"sidecar started, main waiting", []corev1.ContainerStatus{terminated("i", 0), sidecar(true, false)}, []corev1.ContainerStatus{waiting},
			corev1.ConditionTrue, corev1.ConditionFalse, "containers with unready status: [s a]"},
		{"main ready, sidecar not", []corev1.ContainerStatus{terminated("i", 0), sidecar(true, false)}, []corev1.ContainerStatus{ready("a", true)},
			corev1.ConditionTrue, corev1.ConditionFalse, "containers with unready status: [s]"},
		{"a sidecar restarting keeps the pod initialized", []corev1.ContainerStatus{terminated("i", 0), sidecar(false, false)}, []corev1.ContainerStatus{ready("a", true)},
			corev1.ConditionTrue, corev1.ConditionFalse, "containers with unready status: [s]"},
		{"both ready", []corev1.ContainerStatus{terminated("i", 0), sidecar(true, true)}, []corev1.ContainerStatus{ready("a", true)},
			corev1.ConditionTrue, corev1.ConditionTrue, ""},
	}
	for _, tt := range tests {
		phase := Phase(p, tt.init, tt.main, false)
		if got := Initialized(p, tt.init, tt.main, phase); got.Status != tt.initialized {
			t.Errorf("%s: Initialized = %+v, want %v", tt.name, got, tt.initialized)
		}
		got := ContainersReady(p, tt.init, tt.main, phase)
		if got.Status != tt.containersReady || got.Message != tt.message {
			t.Errorf("%s: ContainersReady = %+v, want %v %q", tt.name, got, tt.containersReady, tt.message)
		}
		if r := Ready(p, nil, tt.init, tt.main, phase); r.Status != got.Status || r.Message != got.Message {
			t.Errorf("%s: Ready = %+v, want ContainersReady's %+v", tt.name, r, got)
		}
	}
}

func TestPhase(t *testing.T) {
	waitingAfterCrash := corev1.ContainerStatus{Name: "a", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}
	withPolicy := func(p corev1.RestartPolicy, init ...string) *corev1.Pod {
		pd := pod([]string{"a"})
		pd.Spec.RestartPolicy = p
		for _, i := range init {
			pd.Spec.InitContainers = append(pd.Spec.InitContainers, corev1.Container{Name: i})
		}
		return pd
	}
	tests := []struct {
		name        string
		pod         *corev1.Pod
		init, main  []corev1.ContainerStatus
		want        corev1.PodPhase
		initialized bool
	}{
		{"nothing yet", withPolicy(corev1.RestartPolicyAlways), nil, nil, corev1.PodPending, false},
		{"running", withPolicy(corev1.RestartPolicyAlways), nil, []corev1.ContainerStatus{ready("a", false)}, corev1.PodRunning, false},
		{"init running", withPolicy(corev1.RestartPolicyAlways, "i"), nil, nil, corev1.PodPending, false},
		{"init failed, Never", withPolicy(corev1.RestartPolicyNever, "i"), []corev1.ContainerStatus{terminated("i", 1)}, nil, corev1.PodFailed, false},
		{"init failed, Always", withPolicy(corev1.RestartPolicyAlways, "i"), []corev1.ContainerStatus{terminated("i", 1)}, nil, corev1.PodPending, false},
		{"init done, main running", withPolicy(corev1.RestartPolicyAlways, "i"), []corev1.ContainerStatus{terminated("i", 0)}, []corev1.ContainerStatus{ready("a", true)}, corev1.PodRunning, false},
		{"exit 0, Never", withPolicy(corev1.RestartPolicyNever), nil, []corev1.ContainerStatus{terminated("a", 0)}, corev1.PodSucceeded, false},
		{"exit 1, Never", withPolicy(corev1.RestartPolicyNever), nil, []corev1.ContainerStatus{terminated("a", 1)}, corev1.PodFailed, false},
		{"exit 0, OnFailure", withPolicy(corev1.RestartPolicyOnFailure), nil, []corev1.ContainerStatus{terminated("a", 0)}, corev1.PodSucceeded, false},
		{"exit 1, OnFailure: restarting", withPolicy(corev1.RestartPolicyOnFailure), nil, []corev1.ContainerStatus{terminated("a", 1)}, corev1.PodRunning, false},
		{"crash loop, Always", withPolicy(corev1.RestartPolicyAlways), nil, []corev1.ContainerStatus{waitingAfterCrash}, corev1.PodRunning, false},
		// Sidecars (upstream's getPhase).
		{"sidecar not started: pending", sidecarPod(corev1.RestartPolicyNever), []corev1.ContainerStatus{terminated("i", 0), sidecar(false, false)}, nil, corev1.PodPending, false},
		{"sidecar started, main waiting", sidecarPod(corev1.RestartPolicyNever), []corev1.ContainerStatus{terminated("i", 0), sidecar(true, false)},
			[]corev1.ContainerStatus{{Name: "a", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}}}, corev1.PodPending, false},
		{"main running with sidecar", sidecarPod(corev1.RestartPolicyNever), []corev1.ContainerStatus{terminated("i", 0), sidecar(true, true)}, []corev1.ContainerStatus{ready("a", true)}, corev1.PodRunning, false},
		{"sidecar restarting after init: still running", sidecarPod(corev1.RestartPolicyNever), []corev1.ContainerStatus{terminated("i", 0), sidecar(false, false)}, []corev1.ContainerStatus{ready("a", true)}, corev1.PodRunning, false},
		{"sidecar restarting, app crash-looping, initialized before: running", sidecarPod(corev1.RestartPolicyAlways), []corev1.ContainerStatus{terminated("i", 0), sidecar(false, false)},
			[]corev1.ContainerStatus{{Name: "a", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}, LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}},
			corev1.PodRunning, true},
		{"main done, sidecar still running: running", sidecarPod(corev1.RestartPolicyNever), []corev1.ContainerStatus{terminated("i", 0), sidecar(true, true)}, []corev1.ContainerStatus{terminated("a", 0)}, corev1.PodRunning, false},
		{"main done, sidecar stopped by signal: succeeded", sidecarPod(corev1.RestartPolicyNever), []corev1.ContainerStatus{terminated("i", 0), terminated("s", 143)}, []corev1.ContainerStatus{terminated("a", 0)}, corev1.PodSucceeded, false},
		{"main failed, sidecar stopped: failed", sidecarPod(corev1.RestartPolicyNever), []corev1.ContainerStatus{terminated("i", 0), terminated("s", 0)}, []corev1.ContainerStatus{terminated("a", 2)}, corev1.PodFailed, false},
		// A container's own restartPolicy (ContainerRestartRules).
		{"container Never under pod Always: failed", func() *corev1.Pod {
			pd := withPolicy(corev1.RestartPolicyAlways)
			never := corev1.ContainerRestartPolicyNever
			pd.Spec.Containers[0].RestartPolicy = &never
			return pd
		}(), nil, []corev1.ContainerStatus{terminated("a", 1)}, corev1.PodFailed, false},
	}
	for _, tt := range tests {
		if got := Phase(tt.pod, tt.init, tt.main, tt.initialized); got != tt.want {
			t.Errorf("%s: Phase = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestWithTransitionTimes(t *testing.T) {
	then, now := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0))
	old := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: then}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: then}}
	got := WithTransitionTimes([]corev1.PodCondition{cond("Ready", corev1.ConditionTrue), cond("ContainersReady", corev1.ConditionTrue), cond("Initialized", corev1.ConditionTrue)}, old, now)
	if !got[0].LastTransitionTime.Equal(&now) || !got[1].LastTransitionTime.Equal(&then) || !got[2].LastTransitionTime.Equal(&now) {
		t.Errorf("transition times: %v %v %v", got[0].LastTransitionTime, got[1].LastTransitionTime, got[2].LastTransitionTime)
	}
}
