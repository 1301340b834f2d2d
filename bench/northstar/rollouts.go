package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/operator"
)

// rollouts changes the KubeAPIServer's spec and follows the operator's
// status until each rollout is over.
type rollouts struct {
	api   v1alpha1.Client
	names []string
	// at is the revision every server runs.
	at int32
}

func newRollouts(cfg *rest.Config, names []string) (*rollouts, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &rollouts{api: v1alpha1.Client{Dynamic: dyn}, names: names}, nil
}

// status is the KubeAPIServer and a line saying where each node is.
func (r *rollouts) status(ctx context.Context) (*v1alpha1.KubeAPIServer, string) {
	obj, err := r.api.Get(ctx, v1alpha1.Name)
	if err != nil {
		return nil, err.Error()
	}
	return obj, operator.Summary(obj.Status)
}

// all says whether every server runs revision n with nothing in flight.
func (r *rollouts) all(obj *v1alpha1.KubeAPIServer, n int32) bool {
	return operator.AllAt(obj.Status, r.names, n)
}

// wait polls the status every 250ms until done holds, for at most timeout.
func (r *rollouts) wait(ctx context.Context, timeout time.Duration, what string, done func(*v1alpha1.KubeAPIServer) bool) error {
	last := ""
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(250 * time.Millisecond) {
		obj, s := r.status(ctx)
		if obj != nil && done(obj) {
			return nil
		}
		last = s
	}
	return fmt.Errorf("waited %v for %s: %s", timeout, what, last)
}

// waitSettled waits until the three servers run one revision.
func (r *rollouts) waitSettled(ctx context.Context) error {
	return r.wait(ctx, 3*time.Minute, "the servers at one revision", func(obj *v1alpha1.KubeAPIServer) bool {
		r.at = obj.Status.LatestAvailableRevision
		return r.at > 0 && r.all(obj, r.at)
	})
}

// roll applies spec and waits: a good spec until every server runs the new
// revision, a bad one until a server fell back from it, after which it
// checks that no other server was given it.
func (r *rollouts) roll(ctx context.Context, spec string, bad bool) (time.Duration, string, error) {
	obj, s := r.status(ctx)
	if obj == nil {
		return 0, "", fmt.Errorf("%s", s)
	}
	next := obj.Status.LatestAvailableRevision + 1
	begun := time.Now()
	if _, err := r.api.Dynamic.Resource(v1alpha1.GroupVersionResource).Patch(ctx, v1alpha1.Name, types.MergePatchType, []byte(spec), metav1.PatchOptions{}); err != nil {
		return 0, "", err
	}
	if !bad {
		if err := r.wait(ctx, 5*time.Minute, fmt.Sprintf("revision %d on every server", next), func(obj *v1alpha1.KubeAPIServer) bool { return r.all(obj, next) }); err != nil {
			return 0, "", err
		}
		r.at = next
		return time.Since(begun), fmt.Sprintf("revision %d on %s", next, strings.Join(r.names, ", ")), nil
	}
	failedOn := ""
	err := r.wait(ctx, 5*time.Minute, fmt.Sprintf("a server falling back from revision %d", next), func(obj *v1alpha1.KubeAPIServer) bool {
		for _, ns := range obj.Status.NodeStatuses {
			if ns.LastFailedRevision == next && ns.CurrentRevision == r.at && ns.TargetRevision == 0 {
				failedOn = ns.NodeName + " (" + ns.LastFailedReason + ")"
			}
		}
		return failedOn != ""
	})
	if err != nil {
		return 0, "", err
	}
	d := time.Since(begun)
	// The rollout must have stopped there.
	time.Sleep(10 * time.Second)
	obj, s = r.status(ctx)
	if obj == nil || !r.all(obj, r.at) {
		return d, "", fmt.Errorf("after the fallback on %s not every server runs revision %d: %s", failedOn, r.at, s)
	}
	given := 0
	for _, ns := range obj.Status.NodeStatuses {
		if ns.LastFailedRevision == next || ns.TargetRevision == next {
			given++
		}
	}
	return d, fmt.Sprintf("stopped at the first node: %s fell back to %d; %d of %d servers were given revision %d", failedOn, r.at, given, len(r.names), next), nil
}
