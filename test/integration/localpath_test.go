package integration

import (
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/addons/addonctl"
	"github.com/steadyplane/steadyplane/pkg/addons/localpath"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// TestLocalVolumes runs the local-path provisioner against a real API
// server, controller manager, scheduler and node agent, as the add-on
// controllers' own user (its certificate, the RBAC up grants, and so the
// node API's SubjectAccessReview of nodes/volumes): a claim of the default
// class waits for its pod, is bound to a local volume on the pod's node,
// the pod writes into it, and deleting the claim removes the directory.
func TestLocalVolumes(t *testing.T) {
	ctx, cp, o, _, cs := startNode(t)
	if err := addonctl.EnsureRBAC(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if err := localpath.EnsureStorageClasses(ctx, cs); err != nil {
		t.Fatal(err)
	}
	admin, err := cp.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	store := &pki.Store{Dir: filepath.Join(cp.DataDir(), "pki")}
	kp, err := store.EnsureCert(cp.PKI().CA, pki.CertSpec{Name: "test-addon-controllers", CommonName: addonctl.User, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatal(err)
	}
	as := rest.AnonymousClientConfig(admin)
	as.CertData, as.KeyData = kp.CertPEM, kp.KeyPEM
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() {
		ran <- addonctl.Run(runCtx, as, addonctl.Options{Controllers: []string{addonctl.LocalStorage}, NodeAPICAFile: cp.PKI().KubeletCA.CertPath})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("the add-on controllers: %v", err)
		}
	})

	claims := cs.CoreV1().PersistentVolumeClaims("default")
	if _, err := claims.Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// WaitForFirstConsumer: nothing until a pod uses the claim.
	time.Sleep(2 * time.Second)
	if c, err := claims.Get(ctx, "data", metav1.GetOptions{}); err != nil || c.Status.Phase != corev1.ClaimPending {
		t.Fatalf("the claim before any pod: %v %v; want Pending", c.Status.Phase, err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "writer"}, Spec: corev1.PodSpec{RuntimeClassName: testenv.HostRoot(), RestartPolicy: corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: &shortGrace,
		Volumes:                       []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
		Containers: []corev1.Container{{Name: "c", Image: "local", Command: []string{"sh", "-c", "echo written > /data/file"},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 2*time.Minute, "the writer Succeeded", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "writer", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodSucceeded, string(p.Status.Phase) + " " + p.Status.Message
	})
	c, err := claims.Get(ctx, "data", metav1.GetOptions{})
	if err != nil || c.Status.Phase != corev1.ClaimBound {
		t.Fatalf("the claim: %v %v; want Bound", c.Status.Phase, err)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if localpath.NodeOf(pv) != o.NodeName || pv.Spec.Local == nil || pv.Spec.StorageClassName != localpath.DefaultClassName {
		t.Fatalf("volume %s: node %q, %+v, class %q", pv.Name, localpath.NodeOf(pv), pv.Spec.PersistentVolumeSource, pv.Spec.StorageClassName)
	}
	if b, err := os.ReadFile(filepath.Join(pv.Spec.Local.Path, "file")); err != nil || string(b) != "written\n" {
		t.Fatalf("the pod's file in %s: %q, %v", pv.Spec.Local.Path, b, err)
	}

	if err := cs.CoreV1().Pods("default").Delete(ctx, "writer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := claims.Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, time.Minute, "the volume and its directory gone", func() (bool, string) {
		_, err := cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		_, statErr := os.Stat(pv.Spec.Local.Path)
		return apierrors.IsNotFound(err) && os.IsNotExist(statErr), pv.Name
	})
}
