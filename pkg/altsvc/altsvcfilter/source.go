package altsvcfilter

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Watch keeps adv up to date with the default/kubernetes Endpoints until ctx
// ends. It watches that one object, so the cost does not grow with the
// cluster.
func Watch(ctx context.Context, client kubernetes.Interface, adv *Advertisement, maxAge time.Duration) {
	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "endpoints", metav1.NamespaceDefault,
		fields.OneTermEqualSelector(metav1.ObjectNameField, "kubernetes"))
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Endpoints{},
		ResyncPeriod:  10 * time.Minute,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { update(adv, obj, maxAge) },
			UpdateFunc: func(_, obj any) { update(adv, obj, maxAge) },
			DeleteFunc: func(any) { Update(adv, nil, maxAge) },
		},
	})
	informer.RunWithContext(ctx)
}

func update(adv *Advertisement, obj any, maxAge time.Duration) {
	if ep, ok := obj.(*corev1.Endpoints); ok {
		Update(adv, ep, maxAge)
	}
}
