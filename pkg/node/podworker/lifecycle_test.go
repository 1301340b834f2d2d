package podworker

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

var (
	lcNow   = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	lcStart = lcNow.Add(-time.Hour)
)

// ended is the end of a run that started at lcStart, ran for ranFor and
// exited with code.
func ended(code int32, ranFor time.Duration) *corev1.ContainerStateTerminated {
	return terminatedState("fake://uid-1_c", runtime.Exit{ExitCode: code, StartedAt: lcStart, FinishedAt: lcStart.Add(ranFor)}, "")
}

func waitingFor(reason, message string) *corev1.ContainerStateWaiting {
	return &corev1.ContainerStateWaiting{Reason: reason, Message: message}
}

// describe renders an action as the rows spell it.
func describe(a action) string {
	switch a.kind {
	case actStart:
		return "start"
	case actStartProbes:
		return "startProbes"
	case actStopProbes:
		return "stopProbes"
	case actKill:
		return "kill"
	case actPostStart:
		return "postStart"
	case actEvent:
		return fmt.Sprintf("%s %s: %s", a.eventType, a.reason, fmt.Sprintf(a.format, a.args...))
	}
	return fmt.Sprintf("action(%d)", int(a.kind))
}

// lifecycleRow is one rule of the container lifecycle: from a state, on an
// event, the state that follows and what the worker does.
type lifecycleRow struct {
	rule string
	from lifecycle
	ev   event
	want lifecycle
	acts []string
}

func lifecycleRows() []lifecycleRow {
	c := lifecycle{name: "c"}
	in := func(p phase, s lifecycle) lifecycle { s.phase, s.name = p, "c"; return s }
	initC := func(p phase, s lifecycle) lifecycle { s = in(p, s); s.init = true; return s }
	debugC := func(p phase, s lifecycle) lifecycle { s = in(p, s); s.ephemeral = true; return s }
	sidecarC := func(p phase, s lifecycle) lifecycle { s = initC(p, s); s.sidecar = true; return s }
	always, onFailure, never := fakePod(corev1.RestartPolicyAlways), fakePod(corev1.RestartPolicyOnFailure), fakePod(corev1.RestartPolicyNever)
	// sidecarNever: c is a sidecar of a pod whose policy is Never.
	sidecarNever := fakePod(corev1.RestartPolicyNever)
	sidecarNever.Spec.InitContainers = []corev1.Container{{Name: "c", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
	// ownNever: regular container c says Never in a pod whose policy is Always.
	ownNever := fakePod(corev1.RestartPolicyAlways)
	ownNever.Spec.Containers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
	exit := func(pod *corev1.Pod, term *corev1.ContainerStateTerminated) event {
		return event{kind: evExited, term: term, pod: pod}
	}
	runErr := errors.New(`exec: "server": executable file not found`)
	configErr := fmt.Errorf("%w: env X: values from Secrets are not supported", errConfig)
	setupErr := waitingFor(ReasonContainerCreating, "setting up the pod network: no addresses left")
	pullErr := &imageError{ReasonErrImagePull, errors.New(`Failed to pull image "127.0.0.1:5000/app:v1": MANIFEST_UNKNOWN`)}
	pullBackOff := &imageError{ReasonImagePullBackOff, errors.New(`Back-off pulling image "127.0.0.1:5000/app:v1"`)}
	neverPull := &imageError{ReasonErrImageNeverPull, errors.New(`Container image "app:v1" is not present with pull policy of Never`)}
	invalidName := &imageError{ReasonInvalidImageName, errors.New(`Failed to apply default image tag "App": couldn't parse image name "App": invalid reference format`)}
	crashLoop := func(delay string) *corev1.ContainerStateWaiting {
		return waitingFor(ReasonCrashLoopBackOff, "back-off "+delay+" restarting failed container=c pod=p_ns(uid-1)")
	}
	podInitializing := waitingFor(ReasonPodInitializing, "")
	oom := terminatedState("fake://uid-1_c", runtime.Exit{ExitCode: 137, Signal: "SIGKILL", OOMKilled: true, StartedAt: lcStart, FinishedAt: lcStart.Add(time.Minute)}, "")

	return []lifecycleRow{
		// Adoption: a new agent first looks for the run a previous one left.
		{"a new container with no run left by a previous agent waits to start",
			in(phaseNew, c), event{kind: evNoLeftover}, in(phaseWaiting, c), nil},
		{"a container a previous agent reported finished for good is not run again",
			in(phaseNew, lifecycle{done: ended(0, time.Second)}), event{kind: evNoLeftover},
			in(phaseTerminated, lifecycle{done: ended(0, time.Second)}), nil},
		{"adoption after an agent restart: a run left running goes on, with its counts and probes, not restarted",
			in(phaseNew, lifecycle{restarts: 2, startAttempts: 3}), event{kind: evLeftoverRunning, id: "runc://x"},
			in(phaseRunning, lifecycle{restarts: 2, startAttempts: 3}),
			[]string{"Normal Adopted: Container c (runc://x) left running by a previous node agent goes on", "startProbes"}},
		{"adoption of an init container: no probes",
			initC(phaseNew, c), event{kind: evLeftoverRunning, id: "runc://x"}, initC(phaseRunning, c),
			[]string{"Normal Adopted: Container c (runc://x) left running by a previous node agent goes on"}},
		{"a run left by a previous agent that ended while no agent watched: its end is counted next",
			in(phaseNew, lifecycle{restarts: 2}), event{kind: evLeftoverEnded}, in(phaseRunning, lifecycle{restarts: 2}), nil},

		// Starts.
		{"a container waiting to start starts at the next sync",
			in(phaseWaiting, c), event{kind: evSync}, in(phaseStarting, c), []string{"start"}},
		{"a restart due at once starts at the same sync",
			in(phaseWaiting, lifecycle{notBefore: lcNow}), event{kind: evSync}, in(phaseStarting, lifecycle{notBefore: lcNow}), []string{"start"}},
		{"crash-loop backoff: no start before it has passed",
			in(phaseBackingOff, lifecycle{notBefore: lcNow.Add(time.Second), waiting: crashLoop("10s")}), event{kind: evSync},
			in(phaseBackingOff, lifecycle{notBefore: lcNow.Add(time.Second), waiting: crashLoop("10s")}), nil},
		{"crash-loop backoff: the start once it has passed",
			in(phaseBackingOff, lifecycle{notBefore: lcNow, waiting: crashLoop("10s")}), event{kind: evSync},
			in(phaseStarting, lifecycle{notBefore: lcNow, waiting: crashLoop("10s")}), []string{"start"}},
		{"a started container runs, counts the attempt, leaves its waiting reason and gets its probes",
			in(phaseStarting, lifecycle{startAttempts: 1, waiting: crashLoop("10s")}), event{kind: evStarted},
			in(phaseRunning, lifecycle{startAttempts: 2}), []string{"Normal Started: Started container c", "startProbes"}},
		{"a container with a postStart hook runs it after its start, its probes already under way",
			in(phaseStarting, lifecycle{postStart: true}), event{kind: evStarted},
			in(phaseRunning, lifecycle{postStart: true, startAttempts: 1}), []string{"Normal Started: Started container c", "startProbes", "postStart"}},
		{"a run adopted from a previous agent does not run its postStart hook again",
			in(phaseNew, lifecycle{postStart: true}), event{kind: evLeftoverRunning, id: "runc://x"}, in(phaseRunning, lifecycle{postStart: true}),
			[]string{"Normal Adopted: Container c (runc://x) left running by a previous node agent goes on", "startProbes"}},
		{"a started init container has no probes",
			initC(phaseStarting, c), event{kind: evStarted}, initC(phaseRunning, lifecycle{startAttempts: 1}),
			[]string{"Normal Started: Started container c"}},
		{"a start that fails counts, waits with RunContainerError and is tried again after 10s",
			in(phaseStarting, c), event{kind: evStartFailed, err: runErr, attempted: true},
			in(phaseBackingOff, lifecycle{startAttempts: 1, waiting: waitingFor(ReasonRunContainerError, runErr.Error()), notBefore: lcNow.Add(10 * time.Second)}),
			[]string{"Warning Failed: Error: " + runErr.Error()}},
		{"a start that fails the same way again: no second event",
			in(phaseStarting, lifecycle{startAttempts: 1, waiting: waitingFor(ReasonRunContainerError, runErr.Error())}), event{kind: evStartFailed, err: runErr, attempted: true},
			in(phaseBackingOff, lifecycle{startAttempts: 2, waiting: waitingFor(ReasonRunContainerError, runErr.Error()), notBefore: lcNow.Add(10 * time.Second)}), nil},
		{"a configuration this node cannot run waits with CreateContainerConfigError; the runtime was not asked",
			in(phaseStarting, c), event{kind: evStartFailed, err: configErr},
			in(phaseBackingOff, lifecycle{waiting: waitingFor(ReasonCreateContainerConfigError, configErr.Error()), notBefore: lcNow.Add(10 * time.Second)}),
			[]string{"Warning Failed: Error: " + configErr.Error()}},
		{"an image that cannot be pulled waits with ErrImagePull, the event naming the reason; the runtime was not asked",
			in(phaseStarting, c), event{kind: evStartFailed, err: pullErr},
			in(phaseBackingOff, lifecycle{waiting: waitingFor(ReasonErrImagePull, pullErr.Error()), notBefore: lcNow.Add(10 * time.Second)}),
			[]string{"Warning Failed: Error: ErrImagePull"}},
		{"a pull in its backoff waits with ImagePullBackOff",
			in(phaseStarting, lifecycle{waiting: waitingFor(ReasonErrImagePull, pullErr.Error())}), event{kind: evStartFailed, err: pullBackOff},
			in(phaseBackingOff, lifecycle{waiting: waitingFor(ReasonImagePullBackOff, pullBackOff.Error()), notBefore: lcNow.Add(10 * time.Second)}),
			[]string{"Warning Failed: Error: ImagePullBackOff"}},
		{"an image not present with pull policy Never waits with ErrImageNeverPull",
			in(phaseStarting, c), event{kind: evStartFailed, err: neverPull},
			in(phaseBackingOff, lifecycle{waiting: waitingFor(ReasonErrImageNeverPull, neverPull.Error()), notBefore: lcNow.Add(10 * time.Second)}),
			[]string{"Warning Failed: Error: ErrImageNeverPull"}},
		{"an image name that is no reference waits with InvalidImageName",
			in(phaseStarting, c), event{kind: evStartFailed, err: invalidName},
			in(phaseBackingOff, lifecycle{waiting: waitingFor(ReasonInvalidImageName, invalidName.Error()), notBefore: lcNow.Add(10 * time.Second)}),
			[]string{"Warning Failed: Error: InvalidImageName"}},

		// Liveness.
		{"liveness kill: a container failing its liveness probe is stopped, and restarted when it has ended",
			in(phaseRunning, c), event{kind: evLivenessFailed}, in(phaseKilling, lifecycle{livenessKills: 1}),
			[]string{"Normal Killing: Container c failed liveness probe, will be restarted", "stopProbes", "kill"}},
		{"resize restart: a running container is stopped, and restarted when it has ended",
			in(phaseRunning, c), event{kind: evResizeRestart}, in(phaseKilling, lifecycle{resizeRestart: true}),
			[]string{"Normal Killing: Container c resize requires restart", "stopProbes", "kill"}},
		{"the end of a resize restart runs it again at once, also under OnFailure after exit 0",
			in(phaseKilling, lifecycle{resizeRestart: true, restarts: 2, backoff: 40 * time.Second}), exit(onFailure, ended(0, time.Second)),
			in(phaseWaiting, lifecycle{restarts: 3, last: ended(0, time.Second), backoff: 40 * time.Second, notBefore: lcNow}),
			[]string{"stopProbes"}},
		{"an init container has no liveness probe",
			initC(phaseRunning, c), event{kind: evLivenessFailed}, initC(phaseRunning, c), nil},
		{"the end of a liveness kill restarts the container under Always",
			in(phaseKilling, lifecycle{livenessKills: 1}), exit(always, ended(137, time.Minute)),
			in(phaseWaiting, lifecycle{livenessKills: 1, restarts: 1, last: ended(137, time.Minute), backoff: 10 * time.Second, notBefore: lcNow}),
			[]string{"stopProbes"}},

		// Restart policy and crash-loop backoff.
		{"Always: the first crash restarts at once",
			in(phaseRunning, c), exit(always, ended(1, 2*time.Second)),
			in(phaseWaiting, lifecycle{restarts: 1, last: ended(1, 2*time.Second), backoff: 10 * time.Second, notBefore: lcNow}),
			[]string{"stopProbes"}},
		{"Always: the next crash waits 10s in CrashLoopBackOff",
			in(phaseRunning, lifecycle{restarts: 1, backoff: 10 * time.Second, last: ended(1, 2*time.Second)}), exit(always, ended(2, 2*time.Second)),
			in(phaseBackingOff, lifecycle{restarts: 2, last: ended(2, 2*time.Second), backoff: 20 * time.Second, notBefore: lcNow.Add(10 * time.Second), waiting: crashLoop("10s")}),
			[]string{"stopProbes", "Warning BackOff: Back-off restarting failed container c in pod p"}},
		{"Always: a container that succeeded runs again too",
			in(phaseRunning, c), exit(always, ended(0, time.Second)),
			in(phaseWaiting, lifecycle{restarts: 1, last: ended(0, time.Second), backoff: 10 * time.Second, notBefore: lcNow}),
			[]string{"stopProbes"}},
		{"crash-loop backoff doubles up to 5 minutes",
			in(phaseRunning, lifecycle{restarts: 9, backoff: 5 * time.Minute}), exit(always, ended(1, time.Second)),
			in(phaseBackingOff, lifecycle{restarts: 10, last: ended(1, time.Second), backoff: 5 * time.Minute, notBefore: lcNow.Add(5 * time.Minute), waiting: crashLoop("5m0s")}),
			[]string{"stopProbes", "Warning BackOff: Back-off restarting failed container c in pod p"}},
		{"a run of 10 minutes starts the backoff over: restart at once",
			in(phaseRunning, lifecycle{restarts: 3, backoff: 40 * time.Second}), exit(always, ended(1, 10*time.Minute)),
			in(phaseWaiting, lifecycle{restarts: 4, last: ended(1, 10*time.Minute), backoff: 10 * time.Second, notBefore: lcNow}),
			[]string{"stopProbes"}},
		{"OnFailure: a container that succeeded ends for good",
			in(phaseRunning, lifecycle{restarts: 1, last: ended(1, time.Second)}), exit(onFailure, ended(0, time.Second)),
			in(phaseTerminated, lifecycle{restarts: 1, done: ended(0, time.Second)}), []string{"stopProbes"}},
		{"OnFailure: a container that failed restarts",
			in(phaseRunning, c), exit(onFailure, ended(1, time.Second)),
			in(phaseWaiting, lifecycle{restarts: 1, last: ended(1, time.Second), backoff: 10 * time.Second, notBefore: lcNow}), []string{"stopProbes"}},
		{"Never: a container that failed ends for good",
			in(phaseRunning, c), exit(never, ended(1, time.Second)),
			in(phaseTerminated, lifecycle{done: ended(1, time.Second)}), []string{"stopProbes"}},
		{"OOM kill: an event, then the restart policy",
			in(phaseRunning, c), exit(always, oom),
			in(phaseWaiting, lifecycle{restarts: 1, last: oom, backoff: 10 * time.Second, notBefore: lcNow}),
			[]string{"Warning OOMKilled: Container c was killed for exceeding its memory limit", "stopProbes"}},

		// Ephemeral containers (kubectl debug): never restarted.
		{"an ephemeral container that failed ends for good, even under Always",
			debugC(phaseRunning, c), exit(always, ended(1, time.Second)),
			debugC(phaseTerminated, lifecycle{done: ended(1, time.Second)}), []string{"stopProbes"}},
		{"an ephemeral container that succeeded ends for good under Always",
			debugC(phaseRunning, c), exit(always, ended(0, time.Second)),
			debugC(phaseTerminated, lifecycle{done: ended(0, time.Second)}), []string{"stopProbes"}},

		// Init containers.
		{"an init container that succeeded completes, even under Always",
			initC(phaseRunning, c), exit(always, ended(0, time.Second)),
			initC(phaseTerminated, lifecycle{done: ended(0, time.Second)}), []string{"stopProbes"}},
		{"an init container that failed runs again under Always",
			initC(phaseRunning, c), exit(always, ended(1, time.Second)),
			initC(phaseWaiting, lifecycle{restarts: 1, last: ended(1, time.Second), backoff: 10 * time.Second, notBefore: lcNow}), []string{"stopProbes"}},
		{"an init container that failed under Never ends for good (the pod fails)",
			initC(phaseRunning, c), exit(never, ended(1, time.Second)),
			initC(phaseTerminated, lifecycle{done: ended(1, time.Second)}), []string{"stopProbes"}},

		// Sidecars: init containers with restartPolicy Always.
		{"a started sidecar has probes",
			sidecarC(phaseStarting, c), event{kind: evStarted}, sidecarC(phaseRunning, lifecycle{startAttempts: 1}),
			[]string{"Normal Started: Started container c", "startProbes"}},
		{"an adopted sidecar has probes",
			sidecarC(phaseNew, c), event{kind: evLeftoverRunning, id: "runc://x"}, sidecarC(phaseRunning, c),
			[]string{"Normal Adopted: Container c (runc://x) left running by a previous node agent goes on", "startProbes"}},
		{"a sidecar's failed liveness probe kills it",
			sidecarC(phaseRunning, c), event{kind: evLivenessFailed}, sidecarC(phaseKilling, lifecycle{livenessKills: 1}),
			[]string{"Normal Killing: Container c failed liveness probe, will be restarted", "stopProbes", "kill"}},
		{"a sidecar that succeeded runs again, even under Never",
			sidecarC(phaseRunning, c), exit(sidecarNever, ended(0, time.Second)),
			sidecarC(phaseWaiting, lifecycle{restarts: 1, last: ended(0, time.Second), backoff: 10 * time.Second, notBefore: lcNow}), []string{"stopProbes"}},
		{"a sidecar that crashes backs off",
			sidecarC(phaseRunning, lifecycle{restarts: 1, backoff: 10 * time.Second}), exit(sidecarNever, ended(1, time.Second)),
			sidecarC(phaseBackingOff, lifecycle{restarts: 2, last: ended(1, time.Second), backoff: 20 * time.Second, notBefore: lcNow.Add(10 * time.Second), waiting: crashLoop("10s")}),
			[]string{"stopProbes", "Warning BackOff: Back-off restarting failed container c in pod p"}},

		// A container's own restart policy (ContainerRestartRules).
		{"a container whose own policy is Never ends for good in a pod under Always",
			in(phaseRunning, c), exit(ownNever, ended(1, time.Second)),
			in(phaseTerminated, lifecycle{done: ended(1, time.Second)}), []string{"stopProbes"}},

		{"a container waits with PodInitializing until the init containers completed",
			in(phaseNew, c), event{kind: evInitPending}, in(phaseNew, lifecycle{waiting: podInitializing}), nil},
		{"PodInitializing replaces a setup error",
			in(phaseWaiting, lifecycle{waiting: setupErr}), event{kind: evInitPending}, in(phaseWaiting, lifecycle{waiting: podInitializing}), nil},
		{"PodInitializing while backing off",
			in(phaseBackingOff, lifecycle{notBefore: lcNow}), event{kind: evInitPending}, in(phaseBackingOff, lifecycle{notBefore: lcNow, waiting: podInitializing}), nil},
		{"PodInitializing is kept, not shown, while starting",
			in(phaseStarting, c), event{kind: evInitPending}, in(phaseStarting, lifecycle{waiting: podInitializing}), nil},
		{"PodInitializing is kept, not shown, while running",
			in(phaseRunning, c), event{kind: evInitPending}, in(phaseRunning, lifecycle{waiting: podInitializing}), nil},
		{"PodInitializing is kept, not shown, while being killed",
			in(phaseKilling, c), event{kind: evInitPending}, in(phaseKilling, lifecycle{waiting: podInitializing}), nil},
		{"PodInitializing is kept, not shown, once terminated",
			in(phaseTerminated, lifecycle{done: ended(0, time.Second)}), event{kind: evInitPending},
			in(phaseTerminated, lifecycle{done: ended(0, time.Second), waiting: podInitializing}), nil},

		// The pod's setup.
		{"a pod whose network cannot be made: a new container waits with the error",
			in(phaseNew, c), event{kind: evSetupFailed, waiting: setupErr}, in(phaseNew, lifecycle{waiting: setupErr}), nil},
		{"a pod whose network cannot be made: a container finished for good shows its end",
			in(phaseNew, lifecycle{done: ended(0, time.Second)}), event{kind: evSetupFailed, waiting: setupErr},
			in(phaseNew, lifecycle{done: ended(0, time.Second)}), nil},
		{"a pod whose network cannot be made: a waiting container waits with the error",
			in(phaseWaiting, c), event{kind: evSetupFailed, waiting: setupErr}, in(phaseWaiting, lifecycle{waiting: setupErr}), nil},
		{"a pod whose network cannot be made: a starting container waits with the error",
			in(phaseStarting, c), event{kind: evSetupFailed, waiting: setupErr}, in(phaseStarting, lifecycle{waiting: setupErr}), nil},
		{"a pod whose network cannot be made: a container backing off keeps its time and waits with the error",
			in(phaseBackingOff, lifecycle{notBefore: lcNow.Add(time.Minute), waiting: crashLoop("1m0s")}), event{kind: evSetupFailed, waiting: setupErr},
			in(phaseBackingOff, lifecycle{notBefore: lcNow.Add(time.Minute), waiting: setupErr}), nil},

		// Stop at deletion, retirement or the agent's stop.
		{"stop at deletion: a running container ends for good",
			in(phaseRunning, lifecycle{restarts: 1, last: ended(1, time.Second)}), event{kind: evStopped, term: ended(143, time.Minute)},
			in(phaseTerminated, lifecycle{restarts: 1, last: ended(1, time.Second), done: ended(143, time.Minute)}), nil},
		{"stop at deletion: a container being killed ends for good",
			in(phaseKilling, lifecycle{livenessKills: 1}), event{kind: evStopped, term: ended(137, time.Minute)},
			in(phaseTerminated, lifecycle{livenessKills: 1, done: ended(137, time.Minute)}), nil},
	}
}

// ignoredPair is an event a phase does not expect: it leaves the state as
// it is and asks for nothing.
type ignoredPair struct {
	phase phase
	kind  eventKind
	why   string
}

// lifecycleIgnored are the events each phase does not expect.
func lifecycleIgnored() []ignoredPair {
	pairs := []ignoredPair{
		{phaseNew, evSync, "adoption comes first"},
		{phaseStarting, evSync, "a start is under way"},
		{phaseRunning, evSync, "the run's end comes as Exited"},
		{phaseKilling, evSync, "the kill's end comes as Exited"},
		{phaseTerminated, evSync, "ended for good"},
		{phaseNew, evStarted, "no start was asked"},
		{phaseWaiting, evStarted, "no start was asked"},
		{phaseRunning, evStarted, "one run at a time"},
		{phaseKilling, evStarted, "one run at a time"},
		{phaseBackingOff, evStarted, "no start was asked"},
		{phaseTerminated, evStarted, "ended for good"},
		{phaseNew, evStartFailed, "no start was asked"},
		{phaseWaiting, evStartFailed, "no start was asked"},
		{phaseRunning, evStartFailed, "one run at a time"},
		{phaseKilling, evStartFailed, "one run at a time"},
		{phaseBackingOff, evStartFailed, "no start was asked"},
		{phaseTerminated, evStartFailed, "ended for good"},
		{phaseNew, evResizeRestart, "no run to resize"},
		{phaseWaiting, evResizeRestart, "the next run has the new resources"},
		{phaseStarting, evResizeRestart, "the run under way has them"},
		{phaseKilling, evResizeRestart, "already being stopped"},
		{phaseBackingOff, evResizeRestart, "the next run has the new resources"},
		{phaseTerminated, evResizeRestart, "ended for good"},
		{phaseNew, evLivenessFailed, "probes run on a run only"},
		{phaseWaiting, evLivenessFailed, "probes run on a run only"},
		{phaseStarting, evLivenessFailed, "probes run on a run only"},
		{phaseKilling, evLivenessFailed, "already being killed"},
		{phaseBackingOff, evLivenessFailed, "probes run on a run only"},
		{phaseTerminated, evLivenessFailed, "ended for good"},
		{phaseNew, evExited, "no run yet"},
		{phaseWaiting, evExited, "no run"},
		{phaseStarting, evExited, "no run yet"},
		{phaseBackingOff, evExited, "no run"},
		{phaseTerminated, evExited, "its end is counted already"},
		{phaseNew, evStopped, "no run to stop"},
		{phaseWaiting, evStopped, "no run to stop"},
		{phaseStarting, evStopped, "no run to stop"},
		{phaseBackingOff, evStopped, "no run to stop"},
		{phaseTerminated, evStopped, "ended already"},
		{phaseRunning, evSetupFailed, "a run goes on while the pod's setup is retried"},
		{phaseKilling, evSetupFailed, "a run goes on while the pod's setup is retried"},
		{phaseTerminated, evSetupFailed, "ended for good"},
	}
	for _, k := range []eventKind{evNoLeftover, evLeftoverRunning, evLeftoverEnded} {
		for _, p := range phases {
			if p != phaseNew {
				pairs = append(pairs, ignoredPair{p, k, "adoption is looked for once, by a new container"})
			}
		}
	}
	return pairs
}

func TestTransition(t *testing.T) {
	for _, tt := range lifecycleRows() {
		t.Run(tt.from.phase.String()+"/"+tt.ev.kind.String()+"/"+tt.rule, func(t *testing.T) {
			got, acts := transition(tt.from, tt.ev, lcNow)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("state:\n got %+v\nwant %+v", got, tt.want)
			}
			var described []string
			for _, a := range acts {
				described = append(described, describe(a))
			}
			if !reflect.DeepEqual(described, tt.acts) {
				t.Errorf("actions:\n got %q\nwant %q", described, tt.acts)
			}
		})
	}
}

func TestTransitionIgnored(t *testing.T) {
	for _, tt := range lifecycleIgnored() {
		t.Run(tt.phase.String()+"/"+tt.kind.String(), func(t *testing.T) {
			from := lifecycle{phase: tt.phase, name: "c", restarts: 1, last: ended(1, time.Second), notBefore: lcNow.Add(time.Minute)}
			ev := event{kind: tt.kind, id: "x", err: errors.New("x"), term: ended(2, time.Second), pod: fakePod(corev1.RestartPolicyAlways),
				waiting: waitingFor(ReasonContainerCreating, "x")}
			got, acts := transition(from, ev, lcNow)
			if !reflect.DeepEqual(got, from) || len(acts) != 0 {
				t.Errorf("%s (%s): %+v, %d actions; want the state unchanged, no action", tt.kind, tt.why, got, len(acts))
			}
		})
	}
}

// TestTransitionCovered fails when some phase has no rule for some event,
// neither a row of TestTransition nor a declared lifecycleIgnored pair.
func TestTransitionCovered(t *testing.T) {
	covered := map[[2]int]bool{}
	for _, r := range lifecycleRows() {
		covered[[2]int{int(r.from.phase), int(r.ev.kind)}] = true
	}
	for _, r := range lifecycleIgnored() {
		key := [2]int{int(r.phase), int(r.kind)}
		if covered[key] {
			t.Errorf("%s on %s is both a row and ignored", r.kind, r.phase)
		}
		covered[key] = true
	}
	for _, p := range phases {
		for _, k := range eventKinds {
			if !covered[[2]int{int(p), int(k)}] {
				t.Errorf("no rule for %s in phase %s: add a row to lifecycleRows or a pair to lifecycleIgnored", k, p)
			}
		}
	}
	if len(covered) != len(phases)*len(eventKinds) {
		t.Errorf("%d pairs covered, want %d: a phase or an event is missing from phases or eventKinds", len(covered), len(phases)*len(eventKinds))
	}
}

func TestLifecycleState(t *testing.T) {
	want := map[phase]containerState{phaseNew: stateWaiting, phaseWaiting: stateWaiting, phaseStarting: stateWaiting, phaseRunning: stateRunning,
		phaseKilling: stateRunning, phaseBackingOff: stateWaiting, phaseTerminated: stateTerminated}
	for _, p := range phases {
		if got := (lifecycle{phase: p}).state(); got != want[p] {
			t.Errorf("%s: state %d, want %d", p, got, want[p])
		}
	}
	if got := (lifecycle{phase: phaseNew, done: ended(0, time.Second)}).state(); got != stateTerminated {
		t.Errorf("a new container a previous agent reported finished for good: state %d, want terminated", got)
	}
}

func TestTerminatedState(t *testing.T) {
	start, finish := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), time.Date(2026, 1, 2, 3, 5, 5, 0, time.UTC)
	for _, tt := range []struct {
		name    string
		exit    runtime.Exit
		message string
		want    corev1.ContainerStateTerminated
	}{
		{"success", runtime.Exit{ExitCode: 0, StartedAt: start, FinishedAt: finish}, "",
			corev1.ContainerStateTerminated{ExitCode: 0, Reason: ReasonCompleted}},
		{"failure, the message is kept", runtime.Exit{ExitCode: 1, StartedAt: start, FinishedAt: finish, Message: "not this one"}, "config missing\n",
			corev1.ContainerStateTerminated{ExitCode: 1, Reason: ReasonError, Message: "config missing\n"}},
		{"SIGTERM", runtime.Exit{ExitCode: 143, Signal: "SIGTERM", StartedAt: start, FinishedAt: finish}, "",
			corev1.ContainerStateTerminated{ExitCode: 143, Signal: 15, Reason: ReasonError}},
		{"OOM kill", runtime.Exit{ExitCode: 137, Signal: "SIGKILL", OOMKilled: true, StartedAt: start, FinishedAt: finish}, "out of memory",
			corev1.ContainerStateTerminated{ExitCode: 137, Signal: 9, Reason: ReasonOOMKilled, Message: "out of memory"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			want.ContainerID, want.StartedAt, want.FinishedAt = "runc://abc", metav1.NewTime(start), metav1.NewTime(finish)
			if got := terminatedState("runc://abc", tt.exit, tt.message); !reflect.DeepEqual(*got, want) {
				t.Errorf("terminatedState:\n got %+v\nwant %+v", *got, want)
			}
		})
	}
}
