// Package bootstrap starts static-pod fallback on a node that "up" brings
// up: it puts the API server's revision in place before the node agent
// starts, and once the API answers, publishes what the KubeAPIServer
// operator works from (its CRD, RBAC, templates, revision 1 and the object
// "cluster"). The templates themselves are the caller's: they are the
// control plane's components as pods.
package bootstrap

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/installer"
	"github.com/steadyplane/steadyplane/pkg/fallback/operator"
	"github.com/steadyplane/steadyplane/pkg/fallback/revisions"
)

// InstallOperand puts the API server's manifest in place before the node
// agent starts: the last-known-good revision (or, without one, the newest),
// or in a new data directory the revision first returns (FirstRevision on a
// new cluster, JoinRevision on a joining server). progressf (may be nil)
// gets what was chosen.
func InstallOperand(ctx context.Context, l revisions.Layout, first func(context.Context) (installer.Revision, error), progressf func(string, ...any)) error {
	if progressf == nil {
		progressf = func(string, ...any) {}
	}
	n, err := l.LastKnownGood()
	if err != nil {
		return err
	}
	if n == 0 {
		revs, err := l.Revisions()
		if err != nil {
			return err
		}
		if len(revs) > 0 {
			n = revs[len(revs)-1]
			progressf("kube-apiserver: no last-known-good revision; starting the newest, %d", n)
		}
	}
	if n > 0 {
		progressf("kube-apiserver: revision %d (last-known-good), rolled out by the KubeAPIServer operator", n)
		return installer.Restore(ctx, l, n)
	}
	r, err := first(ctx)
	if err != nil {
		return err
	}
	_, err = installer.Install(ctx, l, r, installer.Options{})
	return err
}

// Revision1 is revision 1 as the operator makes it from an empty spec, and
// its rendering for node from the node's templates.
func Revision1(templates map[string]string, node string) (rev, rendering *corev1.ConfigMap, err error) {
	rev = operator.RevisionConfigMap(operator.Inputs{ConfigMaps: map[string]map[string]string{}, Secrets: map[string]map[string][]byte{}}, 1, "bootstrap by steadyplane up")
	rendering, err = operator.Render(rev, templates, node)
	return rev, rendering, err
}

// FirstRevision is the first server's revision 1 (Revision1) as the
// installer writes it: without a startup monitor, there is nothing to fall
// back to.
func FirstRevision(templates map[string]string, node string, progressf func(string, ...any)) (installer.Revision, error) {
	_, rendering, err := Revision1(templates, node)
	if err != nil {
		return installer.Revision{}, err
	}
	progressf("kube-apiserver: revision 1 (bootstrap), rolled out by the KubeAPIServer operator from now on")
	return installer.Revision{Number: 1, Operand: []byte(rendering.Data[operator.RevisionOperandKey])}, nil
}

// JoinRevision is, for a server joining the cluster, the newest revision
// the cluster's servers run (a latest revision that failed is not one)
// rendered from the server's own templates, read through cfg (the other
// servers: its own does not run yet). On the way it publishes the
// templates and the rendering, so that the operator rolls the next
// revisions onto this node too. Without a startup monitor: the node has no
// revision to fall back to yet.
func JoinRevision(ctx context.Context, cfg *rest.Config, templates map[string]string, node string, progressf func(string, ...any)) (installer.Revision, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return installer.Revision{}, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return installer.Revision{}, err
	}
	if err := PublishTemplates(ctx, client, templates, node); err != nil {
		return installer.Revision{}, err
	}
	cms := client.CoreV1().ConfigMaps(v1alpha1.Namespace)
	list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: operator.RevisionSelector().String()})
	if err != nil {
		return installer.Revision{}, fmt.Errorf("listing the API server's revisions: %w", err)
	}
	rev := operator.Latest(list.Items)
	if rev == nil {
		return installer.Revision{}, fmt.Errorf("the cluster has no revision of the API server (ConfigMaps %s/%s-pod-<N>): is its first server's static-pod fallback off? Join with --static-pod-fallback=off", v1alpha1.Namespace, operator.Operand)
	}
	obj, err := (v1alpha1.Client{Dynamic: dyn}).Get(ctx, v1alpha1.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return installer.Revision{}, fmt.Errorf("reading KubeAPIServer %s, which says what the servers run: %w", v1alpha1.Name, err)
	}
	if obj != nil {
		if n := operator.NewestRunning(obj.Status); n > 0 {
			if rev = operator.Find(list.Items, n); rev == nil {
				return installer.Revision{}, fmt.Errorf("revision %d, which the servers run, is not in the API", n)
			}
		} else if ns, failed := operator.Failed(obj.Status.NodeStatuses, obj.Status.LatestAvailableRevision); failed {
			return installer.Revision{}, fmt.Errorf("no server runs a revision, and the latest, %d, failed on %s (%s): fix the spec first", obj.Status.LatestAvailableRevision, ns.NodeName, ns.LastFailedReason)
		}
	}
	n, _ := strconv.Atoi(rev.Labels[operator.RevisionLabel])
	rendering, err := operator.Render(rev, templates, node)
	if err != nil {
		return installer.Revision{}, err
	}
	if err := createRendering(ctx, cms, rendering); err != nil {
		return installer.Revision{}, fmt.Errorf("creating the rendering of revision %d for %s: %w", n, node, err)
	}
	fetchCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r, err := installer.Fetch(fetchCtx, client, int32(n), node, false)
	if err != nil {
		return r, fmt.Errorf("reading revision %d: %w", n, err)
	}
	progressf("kube-apiserver: revision %d, the newest the cluster's servers run, rendered for this node; rolled out by the KubeAPIServer operator from now on", n)
	return r, nil
}

// createRendering creates rendering, replacing one of the same name made
// from other templates: a server that joins again under the same name may
// run with other paths or addresses than the one before it.
func createRendering(ctx context.Context, cms typedcorev1.ConfigMapInterface, rendering *corev1.ConfigMap) error {
	existing, err := cms.Get(ctx, rendering.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case existing.Annotations[operator.TemplatesHashAnnotation] == rendering.Annotations[operator.TemplatesHashAnnotation]:
		return nil
	default:
		if err := cms.Delete(ctx, rendering.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &existing.UID}}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	_, err = cms.Create(ctx, rendering, metav1.CreateOptions{})
	return err
}

// PublishTemplates creates or updates node's templates ConfigMap.
func PublishTemplates(ctx context.Context, client kubernetes.Interface, templates map[string]string, node string) error {
	cms := client.CoreV1().ConfigMaps(v1alpha1.Namespace)
	if existing, err := cms.Get(ctx, operator.TemplatesName(node), metav1.GetOptions{}); err == nil {
		if maps.Equal(existing.Data, templates) {
			return nil
		}
		existing.Data = templates
		if _, err := cms.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating the templates of %s: %w", node, err)
		}
		return nil
	}
	tmpl := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: operator.TemplatesName(node), Namespace: v1alpha1.Namespace,
		Labels: map[string]string{"app.kubernetes.io/managed-by": "steadyplane", "component": operator.Operand, operator.NodeLabel: node}}, Data: templates}
	if _, err := cms.Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the templates of %s: %w", node, err)
	}
	return nil
}

// Publish, once the API server answers: marks a bootstrap revision
// last-known-good, creates the KubeAPIServer CRD, its namespace and RBAC
// where missing, and publishes node's templates. On a new cluster (first)
// it creates revision 1 with its rendering for node, unless a revision
// exists, and the object "cluster". The caller then starts the operator and
// waits for OperatorAvailable.
func Publish(ctx context.Context, cfg *rest.Config, l revisions.Layout, templates map[string]string, node string, first bool) error {
	if n, err := l.LastKnownGood(); err != nil {
		return err
	} else if n == 0 {
		if err := l.SetLastKnownGood(l.InstalledRevision()); err != nil {
			return err
		}
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := ensureCRD(ctx, ext, v1alpha1.CRD()); err != nil {
		return err
	}
	if err := operator.EnsureRBAC(ctx, client); err != nil {
		return err
	}
	if err := PublishTemplates(ctx, client, templates, node); err != nil {
		return err
	}
	if !first {
		return nil
	}
	cms := client.CoreV1().ConfigMaps(v1alpha1.Namespace)
	existing, err := cms.List(ctx, metav1.ListOptions{LabelSelector: operator.RevisionSelector().String()})
	if err != nil {
		return err
	}
	if operator.Latest(existing.Items) == nil {
		rev1, rendering, err := Revision1(templates, node)
		if err != nil {
			return err
		}
		// The rendering first: a revision without its rendering would be
		// rendered by the operator from the templates, the same, but the
		// node runs exactly this one.
		for _, cm := range []*corev1.ConfigMap{rendering, rev1} {
			if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating revision 1: %w", err)
			}
		}
	}
	api := v1alpha1.Client{Dynamic: dyn}
	if err := api.Create(ctx, &v1alpha1.KubeAPIServer{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.Name}}); err != nil {
		return fmt.Errorf("creating KubeAPIServer %s: %w", v1alpha1.Name, err)
	}
	return nil
}

// OperatorAvailable returns a readiness check: whether the operator has
// reported KubeAPIServer "cluster" Available, and if not, why not.
func OperatorAvailable(cfg *rest.Config) (func(context.Context) (bool, string), error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	api := v1alpha1.Client{Dynamic: dyn}
	return func(ctx context.Context) (bool, string) {
		obj, err := api.Get(ctx, v1alpha1.Name)
		if err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(obj.Status.Conditions, v1alpha1.ConditionAvailable), "the operator has not reported Available"
	}, nil
}

// ensureCRD creates or updates crd and waits until it is served.
func ensureCRD(ctx context.Context, client apiextensionsclient.Interface, crd *apiextensionsv1.CustomResourceDefinition) error {
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	if existing, err := crds.Get(ctx, crd.Name, metav1.GetOptions{}); err == nil {
		existing.Spec = crd.Spec
		if _, err := crds.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating CRD %s: %w", crd.Name, err)
		}
	} else if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		return err == nil && apiextensionshelpers.IsCRDConditionTrue(got, apiextensionsv1.Established), nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("CRD %s not established after 30s", crd.Name)
	}
	return err
}
