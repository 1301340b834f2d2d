// Package podworker runs one pod on a node, as the kubelet's pod workers
// do: one goroutine per pod, so that pods start and stop side by side.
//
// A pod's life is a named state machine (podstate.go): Running, Ended (the
// node ended it: evicted, past its deadline) and Finished, moved by events
// the worker observes (a sync, its deletion, its retirement, the agent's
// stop) through a pure transition that says what to do. Each container's
// life is another (lifecycle.go): New, Waiting, Starting, Running,
// Killing, BackingOff, Terminated, with restart policy, crash-loop backoff,
// probes and hooks. Neither transition runs inside another's actions: what
// an action answers (the runtime's start, a hook's failure, a sync finding
// the pod's end) is queued and fed after.
//
// A sync (sync.go) sets the pod up (its sandbox, network, host files and
// volumes: setup.go) and steps each container; a run's configuration is
// built by one pure function of the pod, the container and what the worker
// gathered (buildRun, containerconfig.go) from its image (image.go) and
// environment (env.go). The pod's status is computed from the containers
// (status.go) and written by PATCH through the Host, the worker's contract
// with its node agent (host.go); stopping follows the kubelet's order and
// grace (stop.go); in-place resizes are allocated then applied
// (resize.go); local storage and deadlines end pods (eviction.go).
package podworker
