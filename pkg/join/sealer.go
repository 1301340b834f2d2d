package join

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
)

// SealAll publishes b sealed for every server token of the cluster (all
// of them: after a rotation of the secrets encryption keys), or only for
// those that have none yet (missingOnly).
func SealAll(ctx context.Context, client kubernetes.Interface, b *Bundle, missingOnly bool) error {
	api := client.CoreV1().Secrets(metav1.NamespaceSystem)
	tokens, err := api.List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(bootstrapapi.SecretTypeBootstrapToken)})
	if err != nil {
		return fmt.Errorf("listing the bootstrap tokens: %w", err)
	}
	for i := range tokens.Items {
		s := &tokens.Items[i]
		if err := sealIfServer(ctx, client, s, func() (*Bundle, error) { return b, nil }, missingOnly); err != nil {
			return err
		}
	}
	return nil
}

// sealIfServer seals the bundle for the token of Secret s when it is a
// server token; when missingOnly, only if its join data is not there
// yet. A token of an earlier release is a server token when it has join
// data. bundle is read only when there is something to seal: the sealer
// looks at every token each 30s, and the bundle is five files.
func sealIfServer(ctx context.Context, client kubernetes.Interface, s *corev1.Secret, bundle func() (*Bundle, error), missingOnly bool) error {
	kind := TokenKind(s.Labels[TokenKindLabel])
	if kind == WorkerToken || (kind != ServerToken && missingOnly) {
		return nil
	}
	_, err := client.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, BundleSecretName(string(s.Data[bootstrapapi.BootstrapTokenIDKey])), metav1.GetOptions{})
	switch {
	case err == nil && missingOnly:
		return nil
	case apierrors.IsNotFound(err) && kind != ServerToken:
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	b, err := bundle()
	if err != nil {
		return err
	}
	return sealFor(ctx, client, s, b)
}

// RunSealer seals the join data for each server token made while the
// cluster runs (steadyplane token create --server) within a second,
// until ctx ends; it looks again at every token each 30s. Every server
// runs one: the first to write the join data wins, the others find it.
func (p Publisher) RunSealer(ctx context.Context, client kubernetes.Interface) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 30*time.Second, informers.WithNamespace(metav1.NamespaceSystem),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = TokenKindLabel + "=" + string(ServerToken) }))
	informer := factory.Core().V1().Secrets().Informer()
	handle := func(obj any) {
		s, ok := obj.(*corev1.Secret)
		if !ok || s.Type != bootstrapapi.SecretTypeBootstrapToken || !s.DeletionTimestamp.IsZero() {
			return
		}
		if err := sealIfServer(ctx, client, s, p.bundle, true); err != nil && ctx.Err() == nil {
			p.Logf("sealing the join data for token %s: %v (tried again within 30s)", s.Data[bootstrapapi.BootstrapTokenIDKey], err)
		}
	}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, obj any) { handle(obj) }})
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
}
