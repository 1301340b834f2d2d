package release

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/pkg/binary"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
)

// upgradeCluster asks the operator to roll target, installed on this
// server (whose node API serves it to the others), over the cluster: it
// sets spec.release and follows status.release until every node runs it
// or the rollout stops at a node that went back.
func upgradeCluster(ctx context.Context, kubeconfig string, target Binary, wait time.Duration, out io.Writer) error {
	digest, err := binary.Digest(target.Path)
	if err != nil {
		return err
	}
	want := v1alpha1.Release{Version: target.Release, Digest: digest}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.Timeout = 10 * time.Second
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	api := v1alpha1.Client{Dynamic: dyn}
	if err := api.SetRelease(ctx, v1alpha1.Name, want); err != nil {
		return fmt.Errorf("setting spec.release of KubeAPIServer %s to %s, for the operator to roll: %w", v1alpha1.Name, want, err)
	}
	fmt.Fprintf(out, "asked the operator to roll release %s (%s) over the cluster: servers one at a time, then workers\n", want.Version, want.Digest)
	if wait == 0 {
		return nil
	}
	return waitRollout(ctx, api, want, wait, out)
}

// waitRollout prints each node's move as status.release shows it, until
// the rollout is over.
func waitRollout(ctx context.Context, api v1alpha1.Client, want v1alpha1.Release, wait time.Duration, out io.Writer) error {
	seen := map[string]string{}
	lastWait := ""
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		if k, err := api.Get(ctx, v1alpha1.Name); err == nil && k.Status.Release != nil && k.Status.Release.Release == want {
			rs := k.Status.Release
			for _, n := range rs.Nodes {
				line := nodeLine(n, want)
				if seen[n.NodeName] != line {
					seen[n.NodeName] = line
					fmt.Fprintf(out, "node %s: %s\n", n.NodeName, line)
				}
			}
			if c := meta.FindStatusCondition(rs.Conditions, v1alpha1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
				return fmt.Errorf("release %s stopped (%s): %s", want.Version, c.Reason, c.Message)
			}
			if c := meta.FindStatusCondition(rs.Conditions, v1alpha1.ConditionProgressing); c != nil {
				if c.Status == metav1.ConditionFalse && c.Reason == "RolledOut" {
					took := ""
					if rs.StartTime != nil && rs.CompletionTime != nil {
						took = " in " + rs.CompletionTime.Sub(rs.StartTime.Time).String()
					}
					fmt.Fprintf(out, "every node runs release %s%s\n", want.Version, took)
					return nil
				}
				if c.Message != lastWait && strings.Contains(c.Message, "not healthy") {
					lastWait = c.Message
					fmt.Fprintf(out, "  %s\n", c.Message)
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("release %s did not roll out within the wait; it goes on (kubectl get kubeapiserver cluster -o yaml shows where it is)", want.Version)
}

// nodeLine says where node n stands in the rollout of want.
func nodeLine(n v1alpha1.NodeRelease, want v1alpha1.Release) string {
	role := "worker"
	if n.Server {
		role = "server"
	}
	switch {
	case n.Release == want.String() && n.Asked != nil && n.Moved != nil:
		return fmt.Sprintf("%s runs %s (moved in %s)", role, want.Version, n.Moved.Sub(n.Asked.Time))
	case n.Release == want.String():
		return role + " runs " + want.Version
	case n.Failed == want.String():
		return fmt.Sprintf("%s went back to %s: %s: %s", role, versionOf(n.Release), n.Reason, n.Message)
	case n.Target == want.String():
		return fmt.Sprintf("%s moving from %s to %s", role, versionOf(n.Release), want.Version)
	default:
		return fmt.Sprintf("%s on %s, waiting its turn", role, versionOf(n.Release))
	}
}

// versionOf is the version of a version@digest, or says it is unknown.
func versionOf(release string) string {
	return cmp.Or(v1alpha1.ReleaseOf(release).Version, "an unknown release")
}
