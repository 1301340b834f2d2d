package agent

import (
	"context"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/node/podworker"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

// staticResync is how often the manifest directory is read even without a
// file event (events can be lost, e.g. on some network file systems).
const staticResync = 20 * time.Second

// mirrorRetry is how soon a mirror pod the API refused is tried again.
const mirrorRetry = time.Second

// mirrorSyncTimeout bounds one pass over the mirror pods; what it did not
// finish is tried again after mirrorRetry.
const mirrorSyncTimeout = 5 * time.Second

// mirrorMutationTTL is how long a mirror pod the agent wrote is preferred to
// an older copy in the informer. A mirror deleted by hand within that time
// after the agent wrote it is recreated only after it.
const mirrorMutationTTL = 30 * time.Second

// runStaticPods keeps the static pods in step with the manifest directory
// and their mirror pods in step with the static pods, until ctx ends.
func (a *Agent) runStaticPods(ctx context.Context) {
	watcher, err := fsnotify.NewWatcher()
	if err == nil {
		if err = watcher.Add(a.opts.PodManifestPath); err != nil {
			watcher.Close()
			watcher = nil
		}
	}
	var events <-chan fsnotify.Event
	if watcher != nil {
		defer watcher.Close()
		events = watcher.Events
	} else {
		klog.ErrorS(err, "Watching the manifest directory; reading it every 20s instead", "path", a.opts.PodManifestPath)
	}
	reported := map[string]bool{} // file+hash+reason of refused manifests already reported
	owners := map[string]string{} // pod full name -> the file that defines the running pod
	t := time.NewTicker(staticResync)
	defer t.Stop()
	for {
		var mirrorsDone bool
		owners, mirrorsDone = a.syncStaticPods(ctx, reported, owners)
		// A mirror the API refused (it is restarting, as with a new
		// control-plane revision) is tried again within a second, not at the
		// next resync: the startup monitor waits for it to show Ready.
		var retry <-chan time.Time
		if !mirrorsDone {
			retry = time.After(mirrorRetry)
		}
		select {
		case <-ctx.Done():
			return
		case <-events:
			// Let a burst of writes (an editor's save) settle.
			time.Sleep(100 * time.Millisecond)
		case <-a.staticWake:
		case <-retry:
		case <-t.C:
		}
	}
}

// staticKey is the worker key of a static pod: its full name, so that one
// pod name has one worker whichever file defines it.
func staticKey(pod *corev1.Pod) string { return staticKeyPrefix + podKey(pod) }

// staticKeyPrefix sets the workers of static pods apart from those of API
// pods of the same namespace/name.
const staticKeyPrefix = "static/"

// syncStaticPods runs the static pods the manifest directory asks for and
// returns which file defines each (owners, for the next turn), and whether
// their mirror pods are in step (false: try again soon).
func (a *Agent) syncStaticPods(ctx context.Context, reported map[string]bool, owners map[string]string) (map[string]string, bool) {
	results, err := staticpod.LoadDir(a.opts.PodManifestPath, a.opts.NodeName)
	if err != nil {
		klog.ErrorS(err, "Reading the manifest directory", "path", a.opts.PodManifestPath)
		return owners, true // the next resync reads it again; fsnotify wakes earlier
	}
	pods, files, refused := staticpod.Desired(results, owners)
	for _, r := range refused {
		if !reported[r.File+r.Hash+r.Err.Error()] {
			reported[r.File+r.Hash+r.Err.Error()] = true
			klog.ErrorS(r.Err, "Refusing a static pod manifest")
			a.nodeEvent(corev1.EventTypeWarning, "StaticPodInvalid", "Refusing static pod manifest: %v", r.Err)
		}
	}
	wanted := map[string]*corev1.Pod{}
	for _, p := range pods {
		wanted[staticKey(p)] = p
	}
	a.mu.Lock()
	// A pod whose manifest changed, went away or became invalid stops, with
	// its grace period; its replacement starts only once it has stopped.
	retired := map[string]*podworker.Worker{}
	for key, w := range a.workers {
		if !w.Static() {
			continue
		}
		if p, ok := wanted[key]; !ok || p.UID != w.Pod().UID {
			w.Retire()
			retired[key] = w
			delete(a.workers, key)
		}
	}
	for key, p := range wanted {
		if _, ok := a.workers[key]; !ok {
			klog.InfoS("Starting static pod", "pod", klog.KObj(p))
			var after <-chan struct{}
			if old := retired[key]; old != nil {
				after = old.Finished()
			}
			a.startWorkerAfter(ctx, key, podworker.New(a, a.workerNode, p, true), after)
		}
	}
	a.mu.Unlock()
	mirrorsDone := true
	if a.podsSynced != nil && a.podsSynced() {
		// Bounded: an API server that is not ready holds each request for
		// up to ~50s (503, Retry-After, client-go's retries), and the next
		// manifest (the startup monitor's fallback from that very server)
		// must not wait for it.
		mctx, cancel := context.WithTimeout(ctx, mirrorSyncTimeout)
		mirrorsDone = a.syncMirrors(mctx, wanted)
		cancel()
	}
	return files, mirrorsDone
}

func (a *Agent) wakeStatic() {
	if a.staticWake == nil {
		return
	}
	select {
	case a.staticWake <- struct{}{}:
	default:
	}
}

// syncMirrors creates missing mirror pods, replaces outdated ones, and
// deletes those whose static pod is gone; false when an API call failed.
func (a *Agent) syncMirrors(ctx context.Context, wanted map[string]*corev1.Pod) bool {
	done := true
	byName := map[string]*corev1.Pod{}
	for _, p := range wanted {
		byName[podKey(p)] = p
	}
	nodeName, nodeUID := a.nodeRef()
	for _, obj := range a.podLister.List() {
		m := obj.(*corev1.Pod)
		hash, isMirror := m.Annotations[staticpod.MirrorAnnotation]
		if !isMirror {
			continue
		}
		if p, ok := byName[podKey(m)]; ok && string(p.UID) == hash && m.DeletionTimestamp == nil {
			continue
		}
		// Grace 0, as the kubelet does: a mirror pod has no containers of its
		// own to wait for, and a terminating one blocks its replacement.
		uid, zero := m.UID, int64(0)
		err := a.client.CoreV1().Pods(m.Namespace).Delete(ctx, m.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			klog.ErrorS(err, "Deleting an outdated mirror pod", "pod", klog.KObj(m))
			done = false
		}
	}
	for _, p := range wanted {
		if a.mirrorFor(p) != nil {
			continue
		}
		created, err := a.client.CoreV1().Pods(p.Namespace).Create(ctx, staticpod.Mirror(p, nodeName, nodeUID), metav1.CreateOptions{})
		switch {
		case err == nil:
			// Its status is due now, not when the informer (backing off
			// after the API server's restart) sees it.
			a.mirrors.Mutation(created)
			a.pokeStaticWorkers()
		case apierrors.IsAlreadyExists(err):
			done = false // the outdated one is still going
		default:
			done = false
			klog.ErrorS(err, "Creating a mirror pod", "pod", klog.KObj(p))
			a.nodeEvent(corev1.EventTypeWarning, "MirrorPodFailed", "Creating mirror pod %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
	return done
}

// mirrorFor returns the API's mirror pod of static pod p, if it is current:
// the newer of what the informer saw and what the agent last wrote.
func (a *Agent) mirrorFor(p *corev1.Pod) *corev1.Pod {
	if a.mirrors == nil {
		return nil
	}
	obj, ok, _ := a.mirrors.GetByKey(podKey(p))
	if !ok {
		return nil
	}
	m := obj.(*corev1.Pod)
	if m.Annotations[staticpod.MirrorAnnotation] != string(p.UID) || m.DeletionTimestamp != nil {
		return nil
	}
	return m
}

// mirrorChanged re-checks the mirror pods and wakes the static pods' workers
// so that their status reaches a new mirror at once.
func (a *Agent) mirrorChanged(*corev1.Pod) {
	a.wakeStatic()
	a.pokeStaticWorkers()
}

// pokeStaticWorkers has every static pod's worker write its status now.
func (a *Agent) pokeStaticWorkers() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, w := range a.workers {
		if w.Static() {
			w.Poke()
		}
	}
}

func (a *Agent) nodeEvent(eventType, reason, format string, args ...any) {
	eventsTotal.WithLabelValues(reason).Inc()
	if a.recorder == nil {
		return
	}
	name, uid := a.nodeRef()
	ref := &corev1.ObjectReference{Kind: "Node", Name: name, UID: uid}
	a.recorder.Eventf(ref, eventType, reason, format, args...)
}
