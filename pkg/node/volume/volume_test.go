package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/moby/sys/mountinfo"

	"github.com/steadyplane/steadyplane/internal/testci"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

func TestCheck(t *testing.T) {
	cases := []struct {
		src     corev1.VolumeSource
		refused bool
	}{
		{corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}, false},
		{corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/x"}}, false},
		{corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}, false},
		{corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{}}, false},
		{corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}, false},
		{corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}, false},
		{corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "data:v1"}}, false},
		{corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}, false},
		{corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{}}, true},
		{corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{}}, true},
		{corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{}}, true},
	}
	for i, tc := range cases {
		pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: tc.src}}}}
		err := Check(pod)
		if (err != nil) != tc.refused || err != nil && !errors.Is(err, ErrUnsupported) {
			t.Errorf("case %d: %v, refused want %v", i, err, tc.refused)
		}
	}
}

// TestImageVolumes: an image volume is made once by the node's mounter
// (never again when the API's volumes are refreshed), is mounted read-only,
// and is refused where the node runs no images.
func TestImageVolumes(t *testing.T) {
	dir := t.TempDir()
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "data:v1", PullPolicy: corev1.PullAlways}}}},
		Containers: []corev1.Container{{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
	}}
	v := New(pod, dir, nil, nil)
	if err := v.Setup(context.Background(), time.Now(), true); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("without a mounter: %v, want ErrUnsupported", err)
	}
	var calls []string
	v.MountImage = func(_ context.Context, name string, src *corev1.ImageVolumeSource, target string) error {
		calls = append(calls, name+" "+src.Reference+" "+string(src.PullPolicy))
		return os.MkdirAll(target, 0o755)
	}
	for i := 0; i < 3; i++ {
		if err := v.Setup(context.Background(), time.Now(), true); err != nil {
			t.Fatal(err)
		}
	}
	if len(calls) != 1 || calls[0] != "data data:v1 Always" {
		t.Errorf("mounter calls %q, want one for volume data", calls)
	}
	mounts, err := v.Mounts(&pod.Spec.Containers[0], false)
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 1 || !mounts[0].ReadOnly || mounts[0].Source != filepath.Join(dir, "image", "data") {
		t.Errorf("mounts %+v, want the image volume read-only from %s", mounts, filepath.Join(dir, "image", "data"))
	}
}

func TestHostPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	_ = os.WriteFile(file, nil, 0o600)
	typ := func(t corev1.HostPathType) *corev1.HostPathType { return &t }
	cases := []struct {
		path string
		t    *corev1.HostPathType
		ok   bool
	}{
		{dir, nil, true},
		{filepath.Join(dir, "missing"), nil, true},
		{dir, typ(corev1.HostPathDirectory), true},
		{file, typ(corev1.HostPathDirectory), false},
		{filepath.Join(dir, "made"), typ(corev1.HostPathDirectoryOrCreate), true},
		{file, typ(corev1.HostPathFile), true},
		{dir, typ(corev1.HostPathFile), false},
		{filepath.Join(dir, "new", "f"), typ(corev1.HostPathFileOrCreate), true},
		{file, typ(corev1.HostPathSocket), false},
	}
	for _, tc := range cases {
		_, err := hostPath(&corev1.HostPathVolumeSource{Path: tc.path, Type: tc.t})
		if (err == nil) != tc.ok {
			t.Errorf("%s %v: %v, want ok=%v", tc.path, tc.t, err, tc.ok)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "made")); err != nil || !st.IsDir() {
		t.Error("DirectoryOrCreate made nothing")
	}
}

func TestMountsAndSubPath(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: outside}}},
	}}}
	v := New(pod, dir, nil, nil)
	if err := v.Setup(context.Background(), time.Now(), false); err != nil {
		t.Fatal(err)
	}
	scratch := filepath.Join(dir, "empty-dir", "scratch")
	if st, err := os.Stat(scratch); err != nil || st.Mode().Perm() != 0o777 {
		t.Errorf("emptyDir %v %v; want a directory any user of the pod can write", st, err)
	}
	_ = os.Symlink(outside, filepath.Join(scratch, "escape"))
	cases := []struct {
		m      corev1.VolumeMount
		source string
		ro     bool
		ok     bool
	}{
		{corev1.VolumeMount{Name: "scratch", MountPath: "/s"}, scratch, false, true},
		{corev1.VolumeMount{Name: "host", MountPath: "/h", ReadOnly: true}, outside, true, true},
		{corev1.VolumeMount{Name: "scratch", MountPath: "/s", SubPath: "a/b"}, filepath.Join(scratch, "a", "b"), false, true},
		{corev1.VolumeMount{Name: "scratch", MountPath: "/s", SubPath: "../x"}, "", false, false},
		{corev1.VolumeMount{Name: "scratch", MountPath: "/s", SubPath: "/etc"}, "", false, false},
		{corev1.VolumeMount{Name: "scratch", MountPath: "/s", SubPath: "escape"}, "", false, false},
		{corev1.VolumeMount{Name: "nope", MountPath: "/n"}, "", false, false},
	}
	for _, tc := range cases {
		ms, err := v.Mounts(&corev1.Container{VolumeMounts: []corev1.VolumeMount{tc.m}}, false)
		if (err == nil) != tc.ok {
			t.Errorf("%+v: %v, want ok=%v", tc.m, err, tc.ok)
			continue
		}
		if err == nil && (ms[0].Source != tc.source || ms[0].ReadOnly != tc.ro || ms[0].Destination != tc.m.MountPath) {
			t.Errorf("%+v: %+v", tc.m, ms[0])
		}
	}
}

// TestSubPathSwappedForSymlink is the regression test of the subPath
// finding: a pod that swaps its subPath directory for a symbolic link to
// the host between the agent's check and the mount must not get the host's
// files (CVE-2017-1002101's class). The mount goes through the file the
// check opened, and a later run sees the link and is refused.
func TestSubPathSwappedForSymlink(t *testing.T) {
	if os.Geteuid() != 0 {
		testci.CannotRun(t, "subPaths are pinned by bind mounts: needs root")
	}
	dir, outside := t.TempDir(), t.TempDir()
	t.Cleanup(func() {
		if err := runtime.UnmountUnder(dir); err != nil {
			t.Error(err)
		}
	})
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}}}
	v := New(pod, dir, nil, nil)
	if err := v.Setup(context.Background(), time.Now(), false); err != nil {
		t.Fatal(err)
	}
	scratch := v.EmptyDirPath("scratch")
	data, swap := filepath.Join(scratch, "data"), filepath.Join(scratch, "swap")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "mine"), []byte("pod"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, swap); err != nil {
		t.Fatal(err)
	}
	exchange := func() {
		if err := unix.Renameat2(unix.AT_FDCWD, data, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE); err != nil {
			t.Error(err)
		}
	}
	c := &corev1.Container{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/d", SubPath: "data"}}}
	hostFilesIn := func(src string) bool {
		_, err := os.Stat(filepath.Join(src, "secret"))
		return err == nil
	}

	ms, err := v.Mounts(c, true)
	if err != nil {
		t.Fatal(err)
	}
	src := ms[0].Source
	if !strings.HasPrefix(src, dir+"/") {
		t.Fatalf("source %s is not a pinned mount under the pod's volumes", src)
	}
	exchange() // the swap, after the check, before runc mounts the source
	if hostFilesIn(src) {
		t.Fatal("the swapped subPath mounted the host's directory")
	}
	if b, err := os.ReadFile(filepath.Join(src, "mine")); err != nil || string(b) != "pod" {
		t.Fatalf("the pinned subPath lost the pod's file: %q %v", b, err)
	}
	if _, err := v.Mounts(c, true); err == nil || !strings.Contains(err.Error(), "leaves the volume") {
		t.Fatalf("the next run's subPath, now a link to the host, gave %v; want it refused", err)
	}

	// The swap racing with the check and the mount: whatever the order,
	// never the host's files.
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 100000; i++ {
			select {
			case <-stop:
				return
			default:
				exchange()
			}
		}
	}()
	mounted := 0
	for i := 0; i < 300; i++ {
		ms, err := v.Mounts(c, true)
		if err != nil {
			continue
		}
		mounted++
		if hostFilesIn(ms[0].Source) {
			t.Errorf("round %d: the subPath mounted the host's directory", i)
			break
		}
	}
	close(stop)
	<-done
	t.Logf("%d of 300 racing mounts went through, none to the host", mounted)
}

// TestSecretVolumesInMemory: a secret volume of a node that runs
// containers is a tmpfs, made once (a second Setup, or an agent restarted
// while the pod runs, keeps the mount its containers see), and the
// pod's teardown takes it down.
func TestSecretVolumesInMemory(t *testing.T) {
	if os.Geteuid() != 0 {
		testci.CannotRun(t, "mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}},
	}}}
	src := staticSource{secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}, Data: map[string][]byte{"key": []byte("secret")}},
		configMap: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}, Data: map[string]string{"a": "b"}}}
	t.Cleanup(func() { _ = runtime.UnmountUnder(dir) })
	for range 2 {
		v := New(pod, dir, src, nil)
		v.MemoryBacked = true
		if err := v.Setup(context.Background(), time.Now(), true); err != nil {
			t.Fatal(err)
		}
	}
	creds, config := filepath.Join(dir, "api", "creds"), filepath.Join(dir, "api", "config")
	var fs unix.Statfs_t
	if err := unix.Statfs(creds, &fs); err != nil || fs.Type != unix.TMPFS_MAGIC {
		t.Errorf("the secret volume %s: filesystem %#x (%v), want a tmpfs", creds, fs.Type, err)
	}
	if b, err := os.ReadFile(filepath.Join(creds, "key")); err != nil || string(b) != "secret" {
		t.Errorf("the secret's key: %q, %v", b, err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(mounts), " "+creds+" "); n != 1 {
		t.Errorf("%s is mounted %d times after two Setups, want once", creds, n)
	}
	if err := unix.Statfs(config, &fs); err != nil || fs.Type == unix.TMPFS_MAGIC {
		t.Errorf("the configMap volume %s is a tmpfs (%v): only secrets and projected volumes are", config, err)
	}
	if err := runtime.UnmountUnder(dir); err != nil {
		t.Fatal(err)
	}
	if mounted, _ := mountinfo.Mounted(creds); mounted {
		t.Errorf("%s still mounted after the teardown", creds)
	}
}

// staticSource serves one secret, one configMap, one claim and one
// PersistentVolume.
type staticSource struct {
	secret    *corev1.Secret
	configMap *corev1.ConfigMap
	claim     *corev1.PersistentVolumeClaim
	volume    *corev1.PersistentVolume
}

func (s staticSource) PersistentVolumeClaim(_ context.Context, _, name string) (*corev1.PersistentVolumeClaim, error) {
	if s.claim != nil && s.claim.Name == name {
		return s.claim, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("persistentvolumeclaims"), name)
}

func (s staticSource) PersistentVolume(_ context.Context, name string) (*corev1.PersistentVolume, error) {
	if s.volume != nil && s.volume.Name == name {
		return s.volume, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("persistentvolumes"), name)
}

func (s staticSource) ConfigMap(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
	if s.configMap != nil && s.configMap.Name == name {
		return s.configMap, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("configmaps"), name)
}

func (s staticSource) Secret(_ context.Context, _, name string) (*corev1.Secret, error) {
	if s.secret != nil && s.secret.Name == name {
		return s.secret, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
}

func (s staticSource) Token(context.Context, string, string, *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return nil, errors.New("no tokens here")
}

// TestClaimVolumes: a claim's volume is the bound local (or hostPath)
// volume's directory, mounted read-only when the pod says so; a claim
// not bound yet, a directory gone, or a volume of another kind is an
// error, never an empty directory made in its place.
func TestClaimVolumes(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "pvc-1")
	if err := os.Mkdir(data, 0o777); err != nil {
		t.Fatal(err)
	}
	bound := func(phase corev1.PersistentVolumeClaimPhase) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pvc-1"},
			Status: corev1.PersistentVolumeClaimStatus{Phase: phase}}
	}
	pv := func(src corev1.PersistentVolumeSource) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-1"}, Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: src}}
	}
	for _, tc := range []struct {
		name     string
		src      staticSource
		readOnly bool
		want     string // the path, or a piece of the error
		ok       bool
	}{
		{name: "local", src: staticSource{claim: bound(corev1.ClaimBound), volume: pv(corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: data}})}, want: data, ok: true},
		{name: "read-only", src: staticSource{claim: bound(corev1.ClaimBound), volume: pv(corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: data}})}, readOnly: true, want: data, ok: true},
		{name: "hostPath", src: staticSource{claim: bound(corev1.ClaimBound), volume: pv(corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: data}})}, want: data, ok: true},
		{name: "pending", src: staticSource{claim: bound(corev1.ClaimPending)}, want: "not bound to a volume yet"},
		{name: "no claim", src: staticSource{}, want: "not found"},
		{name: "directory gone", src: staticSource{claim: bound(corev1.ClaimBound), volume: pv(corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: filepath.Join(dir, "gone")}})}, want: "no such file or directory"},
		{name: "nfs", src: staticSource{claim: bound(corev1.ClaimBound), volume: pv(corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "x", Path: "/"}})}, want: "neither local nor hostPath"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"}, Spec: corev1.PodSpec{
				Volumes:    []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data", ReadOnly: tc.readOnly}}}},
				Containers: []corev1.Container{{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/data"}}}},
			}}
			v := New(pod, t.TempDir(), tc.src, nil)
			err := v.Setup(context.Background(), time.Now(), false)
			if !tc.ok {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Setup: %v; want an error with %q", err, tc.want)
				}
				if _, statErr := os.Stat(filepath.Join(dir, "gone")); statErr == nil {
					t.Error("the missing directory was made again")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mounts, err := v.Mounts(&pod.Spec.Containers[0], false)
			if err != nil {
				t.Fatal(err)
			}
			if len(mounts) != 1 || mounts[0].Source != tc.want || mounts[0].ReadOnly != tc.readOnly {
				t.Errorf("mounts %+v; want %s at /data, read-only %v", mounts, tc.want, tc.readOnly)
			}
		})
	}
}

// TestFSGroup: with the pod's fsGroup, a secret volume's files (defaultMode
// 0400) and an emptyDir are the group's, readable by it (and the emptyDir
// writable), as the kubelet leaves them, so that a non-root user of that
// group reads its secrets.
func TestFSGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		testci.CannotRun(t, "changing a file's group needs root")
	}
	dir := t.TempDir()
	group := int64(1234)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{FSGroup: &group},
		Volumes: []corev1.Volume{
			{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s", DefaultMode: ptr.To[int32](0o400)}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}}}
	src := staticSource{secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}, Data: map[string][]byte{"key": []byte("secret")}}}
	v := New(pod, dir, src, nil)
	if err := v.Setup(context.Background(), time.Now(), false); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{
		filepath.Join(dir, "api", "creds", "key"):  0o440,
		filepath.Join(dir, "empty-dir", "scratch"): 0o777 | os.ModeSetgid,
	} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode() & (os.ModePerm | os.ModeSetgid); got != want {
			t.Errorf("%s: mode %v; want %v", path, got, want)
		}
		if gid := st.Sys().(*syscall.Stat_t).Gid; gid != uint32(group) {
			t.Errorf("%s: group %d; want the fsGroup %d", path, gid, group)
		}
	}
}

// TestDownwardAPIFollowsThePod: a downward API file is written again from
// the pod as the API has it now (SetPod) when the volumes are refreshed.
func TestDownwardAPIFollowsThePod(t *testing.T) {
	dir := t.TempDir()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"k": "v1"}}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
	}}}
	v := New(pod, dir, staticSource{}, nil)
	read := func() string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, "api", "info", "labels"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if err := v.Setup(context.Background(), time.Now(), false); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != `k="v1"` {
		t.Fatalf("labels %q", got)
	}
	updated := pod.DeepCopy()
	updated.Labels["k"] = "v2"
	v.SetPod(updated)
	if err := v.Setup(context.Background(), time.Now(), true); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != `k="v2"` {
		t.Errorf("labels after the pod changed: %q; want k=\"v2\"", got)
	}
}

// TestMemoryEmptyDir: an emptyDir of medium Memory is a tmpfs of its
// sizeLimit (or else the pod's memory limit), which the pod's teardown
// takes down; on a node without root it stays a directory.
func TestMemoryEmptyDir(t *testing.T) {
	if os.Geteuid() != 0 {
		testci.CannotRun(t, "mounting a tmpfs needs root")
	}
	for _, tc := range []struct {
		name  string
		limit *resource.Quantity
		pod   string // the container's memory limit, "" for none
		want  int64
	}{
		{name: "sizeLimit", limit: ptr.To(resource.MustParse("8Mi")), pod: "64Mi", want: 8 << 20},
		{name: "the pod's limit", pod: "16Mi", want: 16 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Cleanup(func() { _ = runtime.UnmountUnder(dir) })
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{
				Volumes:    []corev1.Volume{{Name: "m", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tc.limit}}}},
				Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(tc.pod)}}}},
			}}
			v := New(pod, dir, staticSource{}, corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")})
			v.MemoryBacked = true
			for range 2 { // a second pass mounts nothing more
				if err := v.Setup(context.Background(), time.Now(), true); err != nil {
					t.Fatal(err)
				}
			}
			p := filepath.Join(dir, "empty-dir", "m")
			var st unix.Statfs_t
			if err := unix.Statfs(p, &st); err != nil {
				t.Fatal(err)
			}
			if st.Type != unix.TMPFS_MAGIC || int64(st.Blocks)*st.Bsize != tc.want {
				t.Errorf("%s: filesystem %x of %d bytes; want a tmpfs of %d", p, st.Type, int64(st.Blocks)*st.Bsize, tc.want)
			}
			mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(p))
			if err != nil || len(mounts) != 1 {
				t.Errorf("%s mounted %d times (%v); want once", p, len(mounts), err)
			}
			if err := runtime.UnmountUnder(dir); err != nil {
				t.Fatal(err)
			}
			if mounted, _ := mountinfo.Mounted(p); mounted {
				t.Errorf("%s still mounted after the teardown", p)
			}
		})
	}
}

// TestClaimResolvedOnce: a claim the pod has mounted is not looked up
// again at a refresh, so its deletion (kept by pvc-protection while the
// pod runs) or an API out of reach does not stop the pod.
func TestClaimResolvedOnce(t *testing.T) {
	data := t.TempDir()
	src := staticSource{
		claim: &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv"},
			Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}},
		volume: &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: data}}}},
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"}, Spec: corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
	v := New(pod, t.TempDir(), src, nil)
	if err := v.Setup(context.Background(), time.Now(), false); err != nil {
		t.Fatal(err)
	}
	v.src = staticSource{} // the claim and volume gone from the API
	if err := v.Setup(context.Background(), time.Now(), true); err != nil {
		t.Errorf("a refresh looked the mounted claim up again: %v", err)
	}
}
