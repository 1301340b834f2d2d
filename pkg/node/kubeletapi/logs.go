package kubeletapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/util/flushwriter"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/logs"
	k8sv1 "k8s.io/kubernetes/pkg/apis/core/v1"
)

// LogRun decides which run of a container `kubectl logs` shows, as the
// kubelet does: the running or finished run, or while it waits to restart
// the run that ended last; with previous, the run before the current one.
// Runs are numbered from 0 and RestartCount is the number of the current
// (or next) run.
func LogRun(s corev1.ContainerStatus, pod string, previous bool) (int32, error) {
	last := s.LastTerminationState.Terminated
	switch {
	case previous:
		if last == nil {
			return 0, fmt.Errorf("previous terminated container %q in pod %q not found", s.Name, pod)
		}
		return s.RestartCount - 1, nil
	case s.State.Running != nil, s.State.Terminated != nil:
		return s.RestartCount, nil
	case last != nil:
		return s.RestartCount - 1, nil
	case s.State.Waiting != nil:
		return 0, fmt.Errorf("container %q in pod %q is waiting to start: %s", s.Name, pod, s.State.Waiting.Reason)
	}
	return 0, fmt.Errorf("container %q in pod %q has not started", s.Name, pod)
}

// LogOptions converts the API's PodLogOptions into the CRI log reader's,
// as the kubelet does; sinceSeconds counts back from now.
func LogOptions(o *corev1.PodLogOptions, now time.Time) *logs.LogOptions {
	out := &logs.LogOptions{TailLines: o.TailLines, LimitBytes: o.LimitBytes, Follow: o.Follow, Timestamp: o.Timestamps}
	switch {
	case o.SinceSeconds != nil:
		out.Since = now.Add(-time.Duration(*o.SinceSeconds) * time.Second)
	case o.SinceTime != nil:
		out.Since = o.SinceTime.Time
	}
	return out
}

// containerLogs serves /containerLogs/{namespace}/{pod}/{container} with
// the query of PodLogOptions (follow, tailLines, timestamps, previous,
// sinceSeconds, sinceTime, limitBytes), reading the CRI log files with
// upstream's reader.
func (s *Server) containerLogs(w http.ResponseWriter, r *http.Request) {
	ns, pod, name := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	opts := &corev1.PodLogOptions{}
	query := r.URL.Query()
	if err := k8sv1.Convert_url_Values_To_v1_PodLogOptions(&query, opts, nil); err != nil {
		fail(w, fmt.Errorf("unable to decode query: %w", err), http.StatusBadRequest)
		return
	}
	if opts.TailLines != nil && *opts.TailLines < 0 || opts.LimitBytes != nil && *opts.LimitBytes < 1 || opts.SinceSeconds != nil && *opts.SinceSeconds < 1 {
		fail(w, fmt.Errorf("tailLines must be at least 0, limitBytes and sinceSeconds at least 1"), http.StatusBadRequest)
		return
	}
	c, err := s.host.Container(ns, pod, "", name)
	if err != nil {
		fail(w, err, http.StatusBadRequest)
		return
	}
	run, err := LogRun(c.Status, pod, opts.Previous)
	if err != nil {
		fail(w, err, http.StatusBadRequest)
		return
	}
	// Follow ends when the run does: only the current run can still write.
	running := func() bool { return false }
	if r := c.Run; r != nil && !opts.Previous && run == c.Status.RestartCount {
		running = func() bool {
			select {
			case <-r.Done():
				return false
			default:
				return true
			}
		}
	}
	served()
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Transfer-Encoding", "chunked")
	fw := flushwriter.Wrap(w)
	if err := logs.ReadLogs(r.Context(), c.LogPath(run), name, LogOptions(opts, time.Now()), runState{running: running}, fw, fw); err != nil && r.Context().Err() == nil {
		fmt.Fprintf(fw, "\nerror reading the logs: %v\n", err)
	}
}

// runState answers the log reader's one question to the runtime: whether
// the container still runs (so following goes on).
type runState struct {
	internalapi.RuntimeService
	running func() bool
}

// ContainerStatus reports the run as running or exited.
func (s runState) ContainerStatus(context.Context, string, bool) (*runtimeapi.ContainerStatusResponse, error) {
	state := runtimeapi.ContainerState_CONTAINER_EXITED
	if s.running() {
		state = runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{State: state}}, nil
}
