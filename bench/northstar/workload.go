package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// namespace holds the workload's objects.
const namespace = "northstar"

// workload is the clients that run throughout the rollouts.
type workload struct {
	// stopWriters ends the reader and the writers, stopWatchers the
	// informer and kubectl get -w.
	stopWriters, stopWatchers context.CancelFunc
	writers, watchers         sync.WaitGroup

	mu sync.Mutex
	// written is the version (data "v") each ConfigMap was last written
	// with successfully; informer and kubectl the newest each saw.
	written, informer, kubectl map[string]int
	res                        result
}

// result is what the workload counted.
type result struct {
	reads, failedReads               int
	writes, failedWrites, duplicated int
	applies, failedApplies           int
	lostInformer, lostKubectl        int
	gap                              time.Duration
	kubectlErr                       string
}

func startWorkload(ctx context.Context, bin, kubeconfig string, cfg *rest.Config) (*workload, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	watchCtx, stopWatchers := context.WithCancel(ctx)
	ctx, stopWriters := context.WithCancel(ctx)
	cancel := func() { stopWriters(); stopWatchers() }
	w := &workload{stopWriters: stopWriters, stopWatchers: stopWatchers, written: map[string]int{}, informer: map[string]int{}, kubectl: map[string]int{}}
	seen := func(into map[string]int, name string, v int) {
		w.mu.Lock()
		into[name] = max(into[name], v)
		w.mu.Unlock()
	}

	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace))
	inf := factory.Core().V1().ConfigMaps().Informer()
	record := func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			v, _ := strconv.Atoi(cm.Data["v"])
			seen(w.informer, cm.Name, v)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, obj any) { record(obj) }}); err != nil {
		cancel()
		return nil, err
	}
	factory.Start(watchCtx.Done())
	if !cache.WaitForCacheSync(watchCtx.Done(), inf.HasSynced) {
		cancel()
		return nil, fmt.Errorf("the informer did not sync")
	}

	w.loop(ctx, 100*time.Millisecond, func(ctx context.Context, last *time.Time) {
		_, err := client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		w.mu.Lock()
		defer w.mu.Unlock()
		if ctx.Err() != nil {
			return // the workload's end cut it off
		}
		w.res.reads++
		if err != nil {
			w.res.failedReads++
			fmt.Printf("  read failed: %v\n", err)
			return
		}
		w.res.gap = max(w.res.gap, time.Since(*last))
		*last = time.Now()
	})

	i := 0
	w.loop(ctx, 200*time.Millisecond, func(ctx context.Context, _ *time.Time) {
		i++
		name := fmt.Sprintf("cm-%d", i)
		w.write(ctx, client, name)
	})

	applied := 0
	w.loop(ctx, time.Second, func(ctx context.Context, _ *time.Time) {
		applied++
		manifest := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied, namespace: %s}\ndata: {n: %q}\n", namespace, strconv.Itoa(applied))
		cmd := exec.CommandContext(ctx, bin, "kubectl", "--kubeconfig", kubeconfig, "--request-timeout=30s", "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		cmd.Env = append(os.Environ(), "HOME="+os.TempDir())
		out, err := cmd.CombinedOutput()
		w.mu.Lock()
		defer w.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		w.res.applies++
		if err != nil {
			w.res.failedApplies++
			fmt.Printf("  kubectl apply failed: %v: %s\n", err, strings.TrimSpace(string(out)))
		}
	})

	w.watchers.Add(1)
	go func() {
		defer w.watchers.Done()
		w.watchWithKubectl(watchCtx, bin, kubeconfig, seen)
	}()
	return w, nil
}

// loop calls f every interval until ctx ends (at most a day of calls).
func (w *workload) loop(ctx context.Context, interval time.Duration, f func(context.Context, *time.Time)) {
	w.writers.Add(1)
	go func() {
		defer w.writers.Done()
		last := time.Now()
		for n := 0; n < int(24*time.Hour/interval); n++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
			f(ctx, &last)
		}
	}()
}

// write creates name, then updates it: a create that finds the object
// there, or an update that finds another version, was sent twice.
func (w *workload) write(ctx context.Context, client kubernetes.Interface, name string) {
	cms := client.CoreV1().ConfigMaps(namespace)
	count := func(err error, v int) bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		if ctx.Err() != nil {
			return false
		}
		w.res.writes++
		switch {
		case err == nil:
			w.written[name] = v
			return true
		case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
			w.res.duplicated++
			fmt.Printf("  write of %s v%d sent twice: %v\n", name, v, err)
		default:
			w.res.failedWrites++
			fmt.Printf("  write of %s v%d failed: %v\n", name, v, err)
		}
		return false
	}
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
	if !count(err, 1) {
		return
	}
	cm.Data["v"] = "2"
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	count(err, 2)
}

// watchWithKubectl runs "steadyplane kubectl get -w" until ctx ends,
// recording the version of every event it prints; when it ends by itself
// (its watch closed), it is started again, as a user would.
func (w *workload) watchWithKubectl(ctx context.Context, bin, kubeconfig string, seen func(map[string]int, string, int)) {
	ends := 0
	for n := 0; n < 1000 && ctx.Err() == nil; n++ {
		cmd := exec.CommandContext(ctx, bin, "kubectl", "--kubeconfig", kubeconfig, "get", "configmaps", "-n", namespace, "-w",
			"-o", `jsonpath={.metadata.name} {.data.v}{"\n"}`)
		cmd.Env = append(os.Environ(), "HOME="+os.TempDir())
		out, err := cmd.StdoutPipe()
		if err != nil {
			return
		}
		if err := cmd.Start(); err != nil {
			return
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 2 {
				v, _ := strconv.Atoi(f[1])
				seen(w.kubectl, f[0], v)
			}
		}
		err = cmd.Wait()
		if ctx.Err() != nil {
			break
		}
		ends++
		fmt.Printf("  kubectl get -w ended (%v); started again\n", err)
		time.Sleep(200 * time.Millisecond)
	}
	if ends > 0 {
		w.mu.Lock()
		w.res.kubectlErr = fmt.Sprintf("ended %d times when its server restarted, and was started again", ends)
		w.mu.Unlock()
	}
}

// close ends every client of the workload, counting nothing: a run that
// failed leaves no kubectl behind.
func (w *workload) close() {
	w.stopWriters()
	w.stopWatchers()
	w.writers.Wait()
	w.watchers.Wait()
}

// stop ends the workload, waits for the watchers to catch up (at most
// 30s), and counts the writes they never saw.
func (w *workload) stop(ctx context.Context) result {
	caughtUp := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for name, v := range w.written {
			if w.informer[name] < v || w.kubectl[name] < v {
				return false
			}
		}
		return true
	}
	// The writers stop first: what they wrote must reach both watchers.
	w.stopWriters()
	w.writers.Wait()
	for i := 0; i < 300 && !caughtUp() && ctx.Err() == nil; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	w.stopWatchers()
	w.watchers.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, v := range w.written {
		if w.informer[name] < v {
			w.res.lostInformer++
		}
		if w.kubectl[name] < v {
			w.res.lostKubectl++
		}
	}
	return w.res
}
