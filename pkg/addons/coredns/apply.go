package coredns

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/pkg/rbacutil"
)

// FieldManager owns the fields "up" sets on the DNS's objects.
const FieldManager = "steadyplane-up"

// Apply writes objs (Objects) with the cluster admin's client: the service
// account and RBAC as rbacutil does, the rest by server-side apply, so that
// fields the objects leave out stay as a user set them (the Deployment's
// replicas: one when created, "kubectl scale" after).
func Apply(ctx context.Context, client kubernetes.Interface, objs []any) error {
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: new(bool)}
	*opts.Force = true
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			err = patch(o, func(b []byte) error {
				_, err := client.CoreV1().ConfigMaps(o.Namespace).Patch(ctx, o.Name, types.ApplyPatchType, b, opts)
				return err
			})
		case *corev1.Service:
			err = patch(o, func(b []byte) error {
				_, err := client.CoreV1().Services(o.Namespace).Patch(ctx, o.Name, types.ApplyPatchType, b, opts)
				return err
			})
		case *appsv1.Deployment:
			err = patch(o, func(b []byte) error {
				_, err := client.AppsV1().Deployments(o.Namespace).Patch(ctx, o.Name, types.ApplyPatchType, b, opts)
				return err
			})
		default:
			err = rbacutil.Ensure(ctx, client, obj)
		}
		if err != nil {
			return fmt.Errorf("cluster DNS: %w", err)
		}
	}
	return nil
}

func patch(obj metav1.Object, send func([]byte) error) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	if err := send(b); err != nil {
		return fmt.Errorf("applying %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// Ready says whether the DNS serves: the Deployment's pods of its current
// template are available and the kube-dns Service has a ready endpoint.
// The reason says what is missing.
func Ready(ctx context.Context, client kubernetes.Interface) (bool, string) {
	d, err := client.AppsV1().Deployments(Namespace).Get(ctx, Name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas < want || d.Status.AvailableReplicas < 1 {
		return false, fmt.Sprintf("deployment %s: %d of %d updated, %d available", Name, d.Status.UpdatedReplicas, want, d.Status.AvailableReplicas)
	}
	slices, err := client.DiscoveryV1().EndpointSlices(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + ServiceName})
	if err != nil {
		return false, err.Error()
	}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				return true, ""
			}
		}
	}
	return false, "service " + ServiceName + " has no ready endpoint"
}

// Find returns the cluster DNS's address (the kube-dns Service's) and the
// cluster's domain (DomainAnnotation; cluster.local on a Service made by an
// earlier steadyplane, which did not write it), as a worker's node agent
// needs them for its ClusterFirst pods; found is false when the cluster
// runs no DNS.
func Find(ctx context.Context, client kubernetes.Interface) (ip, domain string, found bool, err error) {
	svc, err := client.CoreV1().Services(Namespace).Get(ctx, ServiceName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", "", false, nil
	case err != nil:
		return "", "", false, fmt.Errorf("service %s/%s: %w", Namespace, ServiceName, err)
	case svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone:
		return "", "", false, fmt.Errorf("service %s/%s has no cluster IP", Namespace, ServiceName)
	}
	domain = svc.Annotations[DomainAnnotation]
	if domain == "" {
		domain = "cluster.local"
	}
	return svc.Spec.ClusterIP, domain, true, nil
}
