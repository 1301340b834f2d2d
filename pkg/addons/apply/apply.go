// Package apply writes the objects of an add-on that up deploys into the API
// (CoreDNS, metrics-server) as "up" owns them: RBAC as rbacutil ensures it,
// everything else by server-side apply with one field manager, so that a
// second "up" (a new binary, a new upstream) changes exactly what changed
// and fields an add-on leaves out stay as a user set them (a Deployment's
// replicas: one when created, "kubectl scale" after).
package apply

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/steadyplane/steadyplane/pkg/rbacutil"
)

// FieldManager owns the fields "up" sets on its add-ons' objects.
const FieldManager = "steadyplane-up"

// Objects writes objs with the clients of cfg (the cluster admin's).
// ConfigMaps, Secrets, Services, Deployments and APIServices are applied;
// service accounts and RBAC go to rbacutil.Ensure; the first failure is
// returned, naming the object.
func Objects(ctx context.Context, cfg *rest.Config, objs []any) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	agg, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: new(bool)}
	*opts.Force = true
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			err = patch(ctx, o, client.CoreV1().ConfigMaps(o.Namespace).Patch, opts)
		case *corev1.Secret:
			err = patch(ctx, o, client.CoreV1().Secrets(o.Namespace).Patch, opts)
		case *corev1.Service:
			err = patch(ctx, o, client.CoreV1().Services(o.Namespace).Patch, opts)
		case *appsv1.Deployment:
			err = patch(ctx, o, client.AppsV1().Deployments(o.Namespace).Patch, opts)
		case *apiregistrationv1.APIService:
			err = patch(ctx, o, agg.ApiregistrationV1().APIServices().Patch, opts)
		default:
			err = rbacutil.Ensure(ctx, client, obj)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// patch applies obj with a typed client's Patch.
func patch[T any](ctx context.Context, obj metav1.Object, send func(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (T, error), opts metav1.PatchOptions) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	if _, err := send(ctx, obj.GetName(), types.ApplyPatchType, b, opts); err != nil {
		name := obj.GetName()
		if ns := obj.GetNamespace(); ns != "" {
			name = ns + "/" + name
		}
		return fmt.Errorf("applying %s: %w", name, err)
	}
	return nil
}

// Rollout says whether Deployment namespace/name has made its pods of the
// current template (every replica updated) and, with available, whether
// at least one is available; the reason says what is missing.
func Rollout(ctx context.Context, client kubernetes.Interface, namespace, name string, available bool) (bool, string) {
	d, err := client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas < want || available && d.Status.AvailableReplicas < 1 {
		return false, fmt.Sprintf("deployment %s: %d of %d updated, %d available", name, d.Status.UpdatedReplicas, want, d.Status.AvailableReplicas)
	}
	return true, ""
}
