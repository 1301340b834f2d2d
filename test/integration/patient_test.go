package integration

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/steadyplane/steadyplane/pkg/client/patient"
)

// TestPatientInformer restarts a real API server three times in a row, as a
// revision that falls back does, then creates an object: an informer whose
// list and watch are patient sees it within seconds of the server being
// back. A plain informer beside it is only logged: its reflector's backoff
// (up to 60s after failures close together) is what the wrapper avoids. The
// node agent's pod informer is one; ConfigMaps stand in for pods here (no
// controller manager makes the service account a pod needs).
func TestPatientInformer(t *testing.T) {
	ctx, c := startHACluster(t, 1, 6*time.Minute)
	cs := kubernetes.NewForConfigOrDie(c.AdminConfig(0))
	const ns = "default"
	informer := func(lw cache.ListerWatcher, seen chan<- string) {
		_, inf := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: &corev1.ConfigMap{},
			Handler: cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
				if obj.(*corev1.ConfigMap).Name != "after-restarts" {
					return
				}
				select {
				case seen <- obj.(*corev1.ConfigMap).Name:
				default:
				}
			}}})
		go inf.Run(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatal("informer did not sync")
		}
	}
	lw := func() cache.ListerWatcher {
		return cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", ns, fields.Everything())
	}
	patientSeen, plainSeen := make(chan string, 1), make(chan string, 1)
	informer(patient.ListerWatcher(ctx, lw(), patient.DefaultOptions), patientSeen)
	informer(lw(), plainSeen)

	// A plain List fails at once while the server is down; a patient one
	// waits for it.
	c.KillAPIServer(0)
	if _, err := lw().List(metav1.ListOptions{}); err == nil {
		t.Fatal("a List succeeded with the API server killed")
	}
	listed := make(chan error, 1)
	go func() {
		_, err := patient.ListerWatcher(ctx, lw(), patient.DefaultOptions).List(metav1.ListOptions{})
		listed <- err
	}()
	select {
	case err := <-listed:
		t.Fatalf("a patient List returned while the API server is down: %v", err)
	case <-time.After(2 * time.Second):
	}
	for i := 1; i <= 3; i++ {
		if err := c.RestartAPIServer(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			time.Sleep(2 * time.Second) // a crash-looping revision's few seconds
			c.KillAPIServer(0)
		}
	}
	select {
	case err := <-listed:
		if err != nil {
			t.Fatalf("the patient List failed across the restarts: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the patient List did not return within 30s of the API server being back")
	}

	back := time.Now()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-restarts"}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-patientSeen:
		t.Logf("the patient informer saw %s %v after the API server was back", name, time.Since(back).Round(10*time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("the patient informer did not see the new ConfigMap within 15s of the API server being back")
	}
	select {
	case name := <-plainSeen:
		t.Logf("the plain informer saw %s %v after the API server was back", name, time.Since(back).Round(10*time.Millisecond))
	case <-time.After(90 * time.Second):
		t.Logf("the plain informer had not seen the new pod 90s after the API server was back")
	}
}
