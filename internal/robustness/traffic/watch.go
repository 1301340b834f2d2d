package traffic

import (
	"context"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/steadyplane/steadyplane/internal/robustness/history"
)

// Watcher watches the namespace's ConfigMaps from a list's resourceVersion
// on and records every event. When a watch ends (a server gone, a
// connection lost), it watches again from the last resourceVersion it
// saw; when the server answers 410 Gone, it lists again and records the
// gap.
type Watcher struct {
	ID         int
	ConfigMaps typedcorev1.ConfigMapInterface
	Recorder   *history.Recorder
	// Retry is the wait before a watch is started again after an error.
	Retry time.Duration
}

// Run watches until ctx ends and returns what it saw.
func (w *Watcher) Run(ctx context.Context) history.Watch {
	out := history.Watch{Watcher: w.ID}
	last := int64(-1)
	for ctx.Err() == nil {
		if last < 0 {
			rv, ok := w.listRV(ctx)
			if !ok {
				continue
			}
			if len(out.Events) == 0 && out.From == 0 {
				out.From = rv
			} else {
				out.Gaps = append(out.Gaps, history.Gap{From: out.Last(), To: rv})
			}
			last = rv
		}
		gone := w.watch(ctx, &out, &last)
		switch {
		case ctx.Err() != nil:
		case gone:
			last = -1
		default:
			out.Resumed++
		}
	}
	return out
}

// listRV is the resourceVersion of a quorum list (none of its items are
// events).
func (w *Watcher) listRV(ctx context.Context) (int64, bool) {
	list, err := w.ConfigMaps.List(ctx, metav1.ListOptions{LabelSelector: Selector})
	if err == nil {
		if rv, perr := strconv.ParseInt(list.ResourceVersion, 10, 64); perr == nil {
			return rv, true
		}
	}
	w.pause(ctx)
	return 0, false
}

// watch runs one watch from *last, recording its events, until it ends;
// it reports whether it ended with 410 Gone.
func (w *Watcher) watch(ctx context.Context, out *history.Watch, last *int64) (gone bool) {
	wi, err := w.ConfigMaps.Watch(ctx, metav1.ListOptions{LabelSelector: Selector, ResourceVersion: strconv.FormatInt(*last, 10), AllowWatchBookmarks: true})
	if err != nil {
		w.pause(ctx)
		return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
	}
	defer wi.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return false
			}
			switch ev.Type {
			case watch.Error:
				status, isStatus := ev.Object.(*metav1.Status)
				return isStatus && (status.Code == http.StatusGone || status.Reason == metav1.StatusReasonExpired || status.Reason == metav1.StatusReasonGone)
			case watch.Bookmark:
				if m, err := metaRV(ev.Object); err == nil {
					*last = m
				}
				continue
			}
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok {
				continue
			}
			rv, err := strconv.ParseInt(cm.ResourceVersion, 10, 64)
			if err != nil {
				continue
			}
			out.Events = append(out.Events, history.Event{Type: history.EventType(ev.Type), Name: cm.Name, Value: cm.Data[valueKey], RV: rv, At: w.Recorder.Since()})
			*last = rv
		}
	}
}

func metaRV(obj any) (int64, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseInt(cm.ResourceVersion, 10, 64)
}

func (w *Watcher) pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(w.Retry):
	}
}
