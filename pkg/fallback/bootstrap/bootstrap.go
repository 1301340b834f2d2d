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
	"k8s.io/client-go/rest"

	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/installer"
	"github.com/steadyplane/steadyplane/pkg/fallback/operator"
	"github.com/steadyplane/steadyplane/pkg/fallback/revisions"
)

// InstallOperand puts the API server's manifest in place before the node
// agent starts: the last-known-good revision (or, without one, the newest),
// or in a new data directory revision 1, made from the templates as the
// operator would make it, which it then finds in the API. templates is
// called only for revision 1; progressf (may be nil) gets what was chosen.
func InstallOperand(ctx context.Context, l revisions.Layout, templates func() (map[string]string, error), progressf func(string, ...any)) error {
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
	data, err := templates()
	if err != nil {
		return err
	}
	cm, err := Revision1(data)
	if err != nil {
		return err
	}
	progressf("kube-apiserver: revision 1 (bootstrap), rolled out by the KubeAPIServer operator from now on")
	_, err = installer.Install(ctx, l, installer.Revision{Number: 1, Operand: []byte(cm.Data[operator.RevisionOperandKey])}, installer.Options{})
	return err
}

// Revision1 is revision 1 as the operator makes it from the templates and
// an empty spec.
func Revision1(templates map[string]string) (*corev1.ConfigMap, error) {
	t, err := operator.ParseTemplates(templates)
	if err != nil {
		return nil, err
	}
	return operator.RevisionConfigMap(t, operator.Inputs{Templates: templates, ConfigMaps: map[string]map[string]string{}, Secrets: map[string]map[string][]byte{}}, 1, "bootstrap by steadyplane up")
}

// Publish, once the API server answers: marks a bootstrap revision
// last-known-good, creates the KubeAPIServer CRD, its namespace and RBAC,
// the templates, revision 1 and the object "cluster" where missing. The
// caller then starts the operator and waits for OperatorAvailable.
func Publish(ctx context.Context, cfg *rest.Config, l revisions.Layout, templates map[string]string) error {
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
	cms := client.CoreV1().ConfigMaps(v1alpha1.Namespace)
	tmpl := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: operator.TemplatesConfigMap, Namespace: v1alpha1.Namespace,
		Labels: map[string]string{"app.kubernetes.io/managed-by": "steadyplane"}}, Data: templates}
	if existing, err := cms.Get(ctx, tmpl.Name, metav1.GetOptions{}); err == nil {
		existing.Data = templates
		_, err = cms.Update(ctx, existing, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("updating the templates: %w", err)
		}
	} else if _, err := cms.Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the templates: %w", err)
	}
	rev1, err := Revision1(templates)
	if err != nil {
		return err
	}
	if _, err := cms.Create(ctx, rev1, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating revision 1: %w", err)
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
