package localpath

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

func options(mutate func(*controller.ProvisionOptions)) controller.ProvisionOptions {
	classes := StorageClasses()
	o := controller.ProvisionOptions{StorageClass: classes[1], PVName: "pvc-1", SelectedNodeName: "n1",
		PVC: &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}
	if mutate != nil {
		mutate(&o)
	}
	return o
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*controller.ProvisionOptions)
		want   string // "" for no error
	}{
		{name: "a claim of one node", mutate: nil},
		{name: "one pod", mutate: func(o *controller.ProvisionOptions) {
			o.PVC.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
		}},
		{name: "many nodes", mutate: func(o *controller.ProvisionOptions) {
			o.PVC.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}, want: "access mode ReadWriteMany"},
		{name: "a selector", mutate: func(o *controller.ProvisionOptions) { o.PVC.Spec.Selector = &metav1.LabelSelector{} }, want: "selector"},
		{name: "no node", mutate: func(o *controller.ProvisionOptions) { o.SelectedNodeName = "" }, want: "WaitForFirstConsumer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(options(tc.mutate))
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check: %v; want %q", err, tc.want)
			}
		})
	}
}

func TestPersistentVolume(t *testing.T) {
	o := options(nil)
	pv := PersistentVolume(o, "n1", Volume{Path: "/data/pvc-1"})
	if pv.Name != "pvc-1" || pv.Spec.Local == nil || pv.Spec.Local.Path != "/data/pvc-1" || NodeOf(pv) != "n1" {
		t.Errorf("PV %s at %+v on %q; want pvc-1 at /data/pvc-1 on n1", pv.Name, pv.Spec.Local, NodeOf(pv))
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Errorf("reclaim %s; want the class's Retain", pv.Spec.PersistentVolumeReclaimPolicy)
	}
	if got := pv.Spec.Capacity[corev1.ResourceStorage]; got.String() != "1Gi" {
		t.Errorf("capacity %s; want the request, 1Gi", got.String())
	}
	if NodeOf(&corev1.PersistentVolume{}) != "" {
		t.Error("a volume without node affinity has a node")
	}
	classes := StorageClasses()
	if len(classes) != 2 || classes[0].Annotations[defaultClassAnnotation] != "true" || *classes[0].ReclaimPolicy != corev1.PersistentVolumeReclaimDelete ||
		*classes[0].VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer || classes[1].Annotations[defaultClassAnnotation] != "" {
		t.Errorf("classes %+v; want local-path the default with Delete, local-path-retain not, both WaitForFirstConsumer", classes)
	}
}

func TestStore(t *testing.T) {
	root := filepath.Join(t.TempDir(), "storage")
	s := Store{Root: root}
	v, err := s.Create("pvc-1")
	if err != nil {
		t.Fatal(err)
	}
	if v.Path != filepath.Join(root, "pvc-1") || v.CapacityBytes <= 0 || v.AvailableBytes <= 0 || v.AvailableBytes > v.CapacityBytes {
		t.Errorf("volume %+v", v)
	}
	for p, mode := range map[string]os.FileMode{root: 0o700, v.Path: 0o777} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v %v; want mode %v", p, st.Mode(), err, mode)
		}
	}
	if err := os.WriteFile(filepath.Join(v.Path, "data"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A retried create keeps the data.
	if _, err := s.Create("pvc-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(v.Path, "data")); err != nil {
		t.Errorf("a second create lost the data: %v", err)
	}
	if err := s.Remove("pvc-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(v.Path); !os.IsNotExist(err) {
		t.Errorf("after Remove: %v", err)
	}
	if err := s.Remove("pvc-1"); err != nil {
		t.Errorf("removing what is gone: %v", err)
	}
	for _, bad := range []string{"", ".", "..", "../etc", "a/b", "/etc", "UPPER", strings.Repeat("a", 254)} {
		if _, err := s.Create(bad); err == nil {
			t.Errorf("Create(%q) took it", bad)
		}
		if err := s.Remove(bad); err == nil {
			t.Errorf("Remove(%q) took it", bad)
		}
	}
}

// FuzzVolumeName: whatever name a caller of the node API sends, the
// directory is a child of the root, or the name is refused.
func FuzzVolumeName(f *testing.F) {
	for _, s := range []string{"pvc-1", "..", "../x", "a/../../b", "a.b", "-a", "x\x00y"} {
		f.Add(s)
	}
	s := Store{Root: "/var/lib/steadyplane/storage"}
	f.Fuzz(func(t *testing.T, name string) {
		dir, err := s.dir(name)
		if err != nil {
			return
		}
		if filepath.Dir(dir) != s.Root || filepath.Base(dir) != name {
			t.Errorf("name %q gives %q, not a child of %s", name, dir, s.Root)
		}
	})
}
