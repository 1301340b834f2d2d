package agent

import (
	"context"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

// staticResync is how often the manifest directory is read even without a
// file event (events can be lost, e.g. on some network file systems).
const staticResync = 20 * time.Second

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
		owners = a.syncStaticPods(ctx, reported, owners)
		select {
		case <-ctx.Done():
			return
		case <-events:
			// Let a burst of writes (an editor's save) settle.
			time.Sleep(100 * time.Millisecond)
		case <-a.staticWake:
		case <-t.C:
		}
	}
}

// staticKey is the worker key of a static pod: its full name, so that one
// pod name has one worker whichever file defines it.
func staticKey(pod *corev1.Pod) string { return "static/" + pod.Namespace + "/" + pod.Name }

// syncStaticPods runs the static pods the manifest directory asks for and
// returns which file defines each (owners, for the next turn).
func (a *Agent) syncStaticPods(ctx context.Context, reported map[string]bool, owners map[string]string) map[string]string {
	results, err := staticpod.LoadDir(a.opts.PodManifestPath, a.opts.NodeName)
	if err != nil {
		klog.ErrorS(err, "Reading the manifest directory", "path", a.opts.PodManifestPath)
		return owners
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
	retired := map[string]*worker{}
	for key, w := range a.workers {
		if !w.static {
			continue
		}
		if p, ok := wanted[key]; !ok || p.UID != w.pod.UID {
			w.retire()
			retired[key] = w
			delete(a.workers, key)
		}
	}
	for key, p := range wanted {
		if _, ok := a.workers[key]; !ok {
			klog.InfoS("Starting static pod", "pod", klog.KObj(p))
			var after <-chan struct{}
			if old := retired[key]; old != nil {
				after = old.finished
			}
			a.startWorkerAfter(ctx, key, newWorker(a, p, true), after)
		}
	}
	a.mu.Unlock()
	if a.podsSynced != nil && a.podsSynced() {
		a.syncMirrors(ctx, wanted)
	}
	return files
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
// deletes those whose static pod is gone.
func (a *Agent) syncMirrors(ctx context.Context, wanted map[string]*corev1.Pod) {
	byName := map[string]*corev1.Pod{}
	for _, p := range wanted {
		byName[p.Namespace+"/"+p.Name] = p
	}
	nodeName, nodeUID := a.nodeRef()
	for _, obj := range a.podLister.List() {
		m := obj.(*corev1.Pod)
		hash, isMirror := m.Annotations[staticpod.MirrorAnnotation]
		if !isMirror {
			continue
		}
		if p, ok := byName[m.Namespace+"/"+m.Name]; ok && string(p.UID) == hash && m.DeletionTimestamp == nil {
			continue
		}
		// Grace 0, as the kubelet does: a mirror pod has no containers of its
		// own to wait for, and a terminating one blocks its replacement.
		uid, zero := m.UID, int64(0)
		err := a.client.CoreV1().Pods(m.Namespace).Delete(ctx, m.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			klog.ErrorS(err, "Deleting an outdated mirror pod", "pod", klog.KObj(m))
		}
	}
	for _, p := range wanted {
		if a.mirrorFor(p) != nil {
			continue
		}
		_, err := a.client.CoreV1().Pods(p.Namespace).Create(ctx, staticpod.Mirror(p, nodeName, nodeUID), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			klog.ErrorS(err, "Creating a mirror pod", "pod", klog.KObj(p))
			a.nodeEvent(corev1.EventTypeWarning, "MirrorPodFailed", "Creating mirror pod %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
}

// mirrorFor returns the API's mirror pod of static pod p, if it is current.
func (a *Agent) mirrorFor(p *corev1.Pod) *corev1.Pod {
	if a.podLister == nil {
		return nil
	}
	obj, ok, _ := a.podLister.GetByKey(p.Namespace + "/" + p.Name)
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
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, w := range a.workers {
		if w.static {
			w.poke()
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
