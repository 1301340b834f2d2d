package monitor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/fallback/revisions"
	"github.com/steadyplane/steadyplane/pkg/node/localstatus"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

// AgentStatus is the node agent's local record of its pods (read from its
// loopback endpoint: it answers while the API server does not).
type AgentStatus interface {
	Pods(ctx context.Context) ([]localstatus.Pod, error)
}

// Server is the operand API server as the monitor sees it.
type Server interface {
	// Probe GETs a health endpoint (verbose); nil when nothing answered.
	Probe(ctx context.Context, path string) *Probe
	// MirrorPod is the operand's mirror pod; nil when it cannot be read.
	MirrorPod(ctx context.Context, namespace, name string) *MirrorPod
}

// Monitor watches one revision of the operand start.
type Monitor struct {
	Layout   revisions.Layout
	Revision int
	NodeName string
	Timeouts Timeouts
	Agent    AgentStatus
	Server   Server
	Clock    clock.PassiveClock
	Log      *slog.Logger
	// Etcd tries the revision's etcd client settings while its API server
	// waits for etcd; nil for never.
	Etcd EtcdTLS

	// since is when the monitor first saw its revision in place, and
	// then when it first saw it started.
	since   time.Time
	started bool
	last    Verdict
}

// Step looks once, under the installer lock, and acts on the verdict: on
// Ready it points last-known-good at the revision, on FallBack it puts the
// fallback target's manifest in place with the three annotations; these and
// Leave remove the monitor's own manifest, and done is true.
func (m *Monitor) Step(ctx context.Context) (v Verdict, done bool, err error) {
	unlock, err := m.Layout.Lock(ctx)
	if err != nil {
		return Verdict{}, false, err
	}
	defer unlock()
	o := m.observe(ctx)
	v = Decide(strconv.Itoa(m.Revision), o, m.Timeouts)
	if v != m.last {
		m.Log.Info("startup monitor", "revision", m.Revision, "action", v.Action.String(), "reason", string(v.Reason), "message", v.Message)
		m.last = v
	}
	switch v.Action {
	case Ready:
		if err := m.Layout.SetLastKnownGood(m.Revision); err != nil {
			return v, false, err
		}
	case FallBack:
		if err := m.fallBack(v); err != nil {
			return v, false, err
		}
	case Leave:
	default:
		return v, false, nil
	}
	if err := os.Remove(m.Layout.MonitorManifest()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return v, true, err
	}
	return v, true, nil
}

// Run steps every interval until the monitor is done or ctx ends.
func (m *Monitor) Run(ctx context.Context, interval time.Duration) (Verdict, error) {
	for {
		v, done, err := m.Step(ctx)
		if err != nil {
			m.Log.Error("startup monitor step", "revision", m.Revision, "err", err)
		}
		if done {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(interval):
		}
	}
}

// observe gathers one Observation.
func (m *Monitor) observe(ctx context.Context) Observation {
	var o Observation
	mine, err := os.ReadFile(m.Layout.RevisionManifest(m.Revision))
	if err != nil {
		return o // this revision is not installed: nothing to judge
	}
	operand, err := os.ReadFile(m.Layout.OperandManifest())
	if err != nil {
		return o
	}
	pod, parseErr := staticpod.Parse(operand, m.NodeName)
	switch {
	case bytes.Equal(operand, mine):
		// The installer's copy, byte for byte: ours even if it does not parse.
		o.OperandRevision = strconv.Itoa(m.Revision)
		if parseErr != nil {
			o.ManifestError = parseErr.Error()
		}
	case parseErr == nil:
		o.OperandRevision = pod.Annotations[fallback.RevisionAnnotation]
		o.OperandFallbackFor = pod.Annotations[fallback.FallbackForRevisionAnnotation]
	}
	if o.OperandRevision != strconv.Itoa(m.Revision) {
		m.since, m.started = time.Time{}, false
		return o
	}
	now := m.Clock.Now()
	if m.since.IsZero() {
		m.since = now
	}
	o.Watched = now.Sub(m.since)
	if parseErr != nil {
		return o
	}
	o.EtcdServers = etcdServers(pod)
	pods, err := m.Agent.Pods(ctx)
	o.AgentDown = err != nil
	if err == nil {
		for _, p := range pods {
			if p.UID == pod.UID {
				o.StartAttempts, o.LivenessKills, o.Running, o.LastTermination = containerRecord(p)
				o.StartRefused = startRefused(p)
			}
		}
	}
	if o.StartAttempts > 0 && !m.started {
		m.since, m.started, o.Watched = now, true, 0
	}
	o.Healthz = m.Server.Probe(ctx, "/healthz?verbose")
	if o.Running && o.Healthz == nil && m.Etcd != nil && o.Watched >= etcdTLSAfter {
		o.EtcdTLSRefused = m.Etcd.Refused(ctx, pod)
	}
	if o.Healthz != nil && o.Healthz.OK {
		o.Readyz = m.Server.Probe(ctx, "/readyz?verbose")
		o.Mirror = m.Server.MirrorPod(ctx, pod.Namespace, pod.Name)
	}
	return o
}

// containerRecord reads the start attempts and liveness kills (of the
// container started most), whether all containers run, and the last end,
// from the agent's record.
func containerRecord(p localstatus.Pod) (attempts, kills int, running bool, last string) {
	for name, n := range p.StartAttempts {
		if int(n) > attempts {
			attempts, kills = int(n), int(p.LivenessKills[name])
		}
	}
	running = len(p.Status.ContainerStatuses) > 0
	for _, cs := range p.Status.ContainerStatuses {
		running = running && cs.State.Running != nil
		t := cs.State.Terminated
		if t == nil {
			t = cs.LastTerminationState.Terminated
		}
		if t != nil {
			last = DescribeEnd(t)
		}
	}
	return attempts, kills, running, last
}

// etcdServers are the host:port of every --etcd-servers argument of the
// operand's containers.
func etcdServers(pod *corev1.Pod) []string {
	var out []string
	for _, c := range pod.Spec.Containers {
		for _, arg := range append(append([]string{}, c.Command...), c.Args...) {
			list, ok := strings.CutPrefix(arg, "--etcd-servers=")
			if !ok {
				continue
			}
			for _, s := range strings.Split(list, ",") {
				if u, err := url.Parse(strings.TrimSpace(s)); err == nil && u.Host != "" {
					out = append(out, u.Host)
				}
			}
		}
	}
	return out
}

// reasonCreateContainerConfigError is the waiting reason (the kubelet's, and
// the node agent's) of a container whose configuration cannot be made.
const reasonCreateContainerConfigError = "CreateContainerConfigError"

// startRefused is the agent's message for a container it will not create.
func startRefused(p localstatus.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason == reasonCreateContainerConfigError {
			return w.Message
		}
	}
	return ""
}

// DescribeEnd says how a container ended: exit code, reason and the
// termination message (the API server's last words, e.g. an unknown flag).
func DescribeEnd(t *corev1.ContainerStateTerminated) string {
	s := fmt.Sprintf("exit code %d", t.ExitCode)
	if t.Reason != "" {
		s += " (" + t.Reason + ")"
	}
	if msg := strings.TrimSpace(t.Message); msg != "" {
		s += ": " + msg
	}
	return s
}

// fallBack writes the fallback target's manifest, annotated with the
// failed revision, the reason and the message, as the operand manifest.
// With nothing to fall back to (bootstrap) the failed revision stays.
func (m *Monitor) fallBack(v Verdict) error {
	target, ok, err := m.Layout.FallbackTarget(m.Revision)
	if err != nil {
		return err
	}
	if !ok {
		m.Log.Error("no revision to fall back to; leaving the failed one in place", "revision", m.Revision, "reason", string(v.Reason), "message", v.Message)
		return nil
	}
	data, err := os.ReadFile(m.Layout.RevisionManifest(target))
	if err != nil {
		return err
	}
	annotated, err := Annotate(data, map[string]string{
		fallback.FallbackForRevisionAnnotation: strconv.Itoa(m.Revision),
		fallback.FallbackReasonAnnotation:      string(v.Reason),
		fallback.FallbackMessageAnnotation:     v.Message,
	})
	if err != nil {
		return fmt.Errorf("revision %d's manifest: %w", target, err)
	}
	m.Log.Info("falling back", "from", m.Revision, "to", target, "reason", string(v.Reason), "message", v.Message)
	return atomicfile.WriteFile(m.Layout.OperandManifest(), annotated, 0o600)
}

// Annotate adds annotations to a pod manifest and returns it as YAML.
func Annotate(manifest []byte, annotations map[string]string) ([]byte, error) {
	pod, err := revisions.DecodeManifest(manifest)
	if err != nil {
		return nil, err
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	for k, v := range annotations {
		pod.Annotations[k] = v
	}
	return yaml.Marshal(pod)
}
