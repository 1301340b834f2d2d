package controlplane

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/kubernetes/cmd/kubeadm/app/util/pubkeypin"

	"github.com/steadyplane/steadyplane/pkg/etcd/snapshot"
	"github.com/steadyplane/steadyplane/pkg/node/agent"
)

// snapshotEtcd takes a scheduled snapshot of this server's etcd member
// every EtcdSnapshotInterval after its newest (at once when it has none
// or is late) until ctx ends, keeping the newest EtcdSnapshotRetention. Each is a log line, a metric and an Event on
// the server's Node (EtcdSnapshotSaved, or Warning EtcdSnapshotFailed).
func (cp *ControlPlane) snapshotEtcd(ctx context.Context) {
	every := cp.opts.EtcdSnapshotInterval
	if every <= 0 {
		return
	}
	agent.RegisterMetrics(snapshot.Collectors()...)
	recorder, node, stop := cp.nodeEvents(ctx, "steadyplane-etcd-snapshot")
	defer stop()
	retry := time.Duration(0) // after a failure: a minute (or every, if shorter)
	for {
		wait := retry
		s, err := snapshot.ForDataDir(string(cp.dir), cp.opts.EtcdSnapshotDir)
		if err == nil {
			s.Endpoint, s.Node = cp.addr.etcdClientURL(), cp.opts.NodeName
			if list, lerr := snapshot.List(s.Dir); retry == 0 && lerr == nil {
				wait = time.Until(snapshot.NextScheduled(list, s.Node, every, time.Now()))
			} else if retry == 0 {
				wait = every
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		// Read again after the wait: the etcd client certificate may
		// have been renewed meanwhile (a short --cert-validity).
		if s2, err2 := snapshot.ForDataDir(string(cp.dir), cp.opts.EtcdSnapshotDir); err2 == nil {
			s2.Endpoint, s2.Node = cp.addr.etcdClientURL(), cp.opts.NodeName
			s, err = s2, nil
		}
		var m snapshot.Meta
		var pruned []string
		if err == nil {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
			m, pruned, err = snapshot.Scheduled(sctx, s, cp.opts.EtcdSnapshotRetention)
			cancel()
		}
		if err != nil {
			retry = min(every, time.Minute)
			cp.progressf("etcd snapshot failed: %v (tried again in %v)", err, retry)
			recorder.Event(node, corev1.EventTypeWarning, "EtcdSnapshotFailed", err.Error())
			continue
		}
		retry = 0
		msg := fmt.Sprintf("etcd snapshot %s saved: revision %d, %d bytes", m.DB(s.Dir), m.Revision, m.Size)
		if len(pruned) > 0 {
			msg += fmt.Sprintf("; deleted %s (--etcd-snapshot-retention=%d)", strings.Join(pruned, ", "), cp.opts.EtcdSnapshotRetention)
		}
		cp.progressf("%s", msg)
		recorder.Event(node, corev1.EventTypeNormal, "EtcdSnapshotSaved", msg)
	}
}

// nodeEvents records Events of component on this server's Node, until
// stop is called.
func (cp *ControlPlane) nodeEvents(ctx context.Context, component string) (recorder record.EventRecorder, node *corev1.ObjectReference, stop func()) {
	events := record.NewBroadcaster(record.WithContext(ctx))
	if client, err := cp.adminClient(); err == nil {
		events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	}
	recorder = events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component, Host: cp.opts.NodeName})
	return recorder, &corev1.ObjectReference{Kind: "Node", Name: cp.opts.NodeName, APIVersion: "v1"}, events.Shutdown
}

// restoreEtcd replaces this server's etcd data with the snapshot at path
// (snapshot.Verify first: whole, and of this cluster; nothing is
// touched otherwise), keeping the data it had beside it, and says where.
// The member it makes starts as a cluster of one; restoreDone undoes
// the swap if it does not.
func (cp *ControlPlane) restoreEtcd(path string) (kept string, err error) {
	m, err := snapshot.Verify(path, pubkeypin.Hash(cp.pki.CA.Cert))
	if err != nil {
		return "", fmt.Errorf("--cluster-reset-restore-path: %w", err)
	}
	cp.progressf("cluster reset: restoring etcd snapshot %s (taken %s on %s, revision %d)", path, m.Created.UTC().Format(time.RFC3339), m.Node, m.Revision)
	staging, err := snapshot.Prepare(path, cp.dir.etcdData())
	if err != nil {
		return "", fmt.Errorf("--cluster-reset-restore-path: %w", err)
	}
	kept, err = snapshot.Swap(staging, cp.dir.etcdData(), time.Now().UTC().Format("20060102T150405Z"))
	if err != nil {
		_ = os.RemoveAll(staging)
		return "", fmt.Errorf("--cluster-reset-restore-path: %w", err)
	}
	return kept, nil
}
