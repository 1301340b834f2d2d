package controlplane

import (
	"context"
	"fmt"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// EnsureHostRuntimeClass creates the RuntimeClass of pods that run from
// the host's system directories instead of an image (the control plane's
// static pods). Their mirror pods are refused by the RuntimeClass admission
// plugin until it exists.
func EnsureHostRuntimeClass(ctx context.Context, client kubernetes.Interface) error {
	rc := &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: runtime.HostRuntimeClass, Labels: map[string]string{"app.kubernetes.io/managed-by": "steadyplane"}},
		Handler:    runtime.HostRuntimeHandler,
	}
	_, err := client.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating RuntimeClass %s: %w", rc.Name, err)
	}
	return nil
}
