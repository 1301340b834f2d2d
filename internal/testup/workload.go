package testup

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/steadyplane/steadyplane/pkg/clientconfig"
)

// Workload is a client-go program's traffic through the HA client while
// a test disturbs the cluster: reads of a ConfigMap, writes to it, and a
// watch on it resumed from the last resourceVersion it saw.
type Workload struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu                          sync.Mutex
	reads, failedReads          int
	writes, failedWrites        int
	written                     map[string]bool // resourceVersions written
	watched                     map[string]bool // resourceVersions the watch delivered
	longestGap                  time.Duration
	lastRead                    time.Time
	lostEvents, duplicateEvents int
	errors                      []string // the first few
}

func (l *Workload) failed(err error) {
	if len(l.errors) < 5 {
		l.errors = append(l.errors, err.Error())
	}
}

// WorkloadResult is what a Workload counted: its requests, those that
// failed (with the first errors), the watch events lost or duplicated
// against the writes that succeeded, and the longest time between two
// successful reads.
type WorkloadResult struct {
	Reads, FailedReads, Writes, FailedWrites, LostEvents, DuplicateEvents int
	LongestGap                                                            time.Duration
	Errors                                                                []string
}

func (r WorkloadResult) String() string {
	s := fmt.Sprintf("reads %d (failed %d), writes %d (failed %d), lost watch events %d, duplicated %d, longest gap between reads %v",
		r.Reads, r.FailedReads, r.Writes, r.FailedWrites, r.LostEvents, r.DuplicateEvents, r.LongestGap.Round(time.Millisecond))
	if len(r.Errors) > 0 {
		s += "; first errors: " + strings.Join(r.Errors, "; ")
	}
	return s
}

// StartWorkload starts a Workload on the ConfigMap default/name, through
// the HA client of kubeconfig, until Stop.
func StartWorkload(ctx context.Context, t *testing.T, kubeconfig, name string) *Workload {
	t.Helper()
	cfg, _, err := clientconfig.Load(kubeconfig, clientconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 10 * time.Second
	client := kubernetes.NewForConfigOrDie(cfg)
	cms := client.CoreV1().ConfigMaps("default")
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": "0"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &Workload{cancel: cancel, written: map[string]bool{}, watched: map[string]bool{}, lastRead: time.Now()}
	l.wg.Add(3)
	go func() { // reads
		defer l.wg.Done()
		for ctx.Err() == nil {
			_, err := cms.Get(ctx, name, metav1.GetOptions{})
			l.mu.Lock()
			if ctx.Err() == nil {
				l.reads++
				if err != nil {
					l.failedReads++
					l.failed(err)
				} else {
					l.longestGap = max(l.longestGap, time.Since(l.lastRead))
					l.lastRead = time.Now()
				}
			}
			l.mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	go func() { // writes
		defer l.wg.Done()
		for n := 1; ctx.Err() == nil; n++ {
			var rv string
			// Another writer is no failure: retried on a conflict.
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur, err := cms.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Data = map[string]string{"n": fmt.Sprint(n)}
				updated, err := cms.Update(ctx, cur, metav1.UpdateOptions{})
				if err == nil {
					rv = updated.ResourceVersion
				}
				return err
			})
			l.mu.Lock()
			if ctx.Err() == nil {
				l.writes++
				if err != nil {
					l.failedWrites++
					l.failed(err)
				} else {
					l.written[rv] = true
				}
			}
			l.mu.Unlock()
			time.Sleep(200 * time.Millisecond)
		}
	}()
	go func() { // the watch, resumed from the last version seen
		defer l.wg.Done()
		rv := cm.ResourceVersion
		for ctx.Err() == nil {
			w, err := cms.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					if st := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(st) || apierrors.IsGone(st) {
						t.Errorf("the watch expired at %s: events between are lost", rv)
						// Listed again, as an informer would: the
						// loss is counted (Stop), not repeated.
						if cur, err := cms.Get(ctx, name, metav1.GetOptions{}); err == nil {
							rv = cur.ResourceVersion
						}
					}
					time.Sleep(100 * time.Millisecond)
					break
				}
				obj, ok := ev.Object.(*corev1.ConfigMap)
				if !ok {
					continue
				}
				rv = obj.ResourceVersion
				if ev.Type == watch.Modified {
					l.mu.Lock()
					if l.watched[rv] {
						l.duplicateEvents++
					}
					l.watched[rv] = true
					l.mu.Unlock()
				}
			}
			w.Stop()
		}
	}()
	return l
}

// Stop ends the workload once the watch has caught up with the writes,
// and counts what it lost.
func (l *Workload) Stop() WorkloadResult {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		l.mu.Lock()
		caught := true
		for rv := range l.written {
			caught = caught && l.watched[rv]
		}
		l.mu.Unlock()
		if caught {
			break
		}
	}
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	for rv := range l.written {
		if !l.watched[rv] {
			l.lostEvents++
		}
	}
	return WorkloadResult{Reads: l.reads, FailedReads: l.failedReads, Writes: l.writes, FailedWrites: l.failedWrites,
		LostEvents: l.lostEvents, DuplicateEvents: l.duplicateEvents, LongestGap: l.longestGap, Errors: l.errors}
}
