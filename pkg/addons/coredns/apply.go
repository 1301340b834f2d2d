package coredns

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/pkg/addons/apply"
)

// Ready says whether the DNS serves: the Deployment's pods of its current
// template are available and the kube-dns Service has a ready endpoint.
// The reason says what is missing.
func Ready(ctx context.Context, client kubernetes.Interface) (bool, string) {
	if ok, why := apply.Rollout(ctx, client, Namespace, Name, true); !ok {
		return false, why
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
