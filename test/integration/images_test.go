package integration

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/moby/sys/mountinfo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/internal/testimage"
)

// TestPodsFromImages runs the real API server and node agent with pods whose
// images come from a private registry on 127.0.0.1: pulled with the pod's
// image pull secret, run with the image's environment, working directory
// and user; refused with the kubelet's reasons when they cannot be had; and
// listed in the Node's status.
func TestPodsFromImages(t *testing.T) {
	testimage.RequireBusybox(t)
	ctx, cp, o, _, cs := startNode(t)
	pods := cs.CoreV1().Pods("default")

	login := &authn.Basic{Username: "puller", Password: "s3cret"}
	host := testimage.StartRegistry(t, login)
	busybox, err := testimage.Busybox()
	if err != nil {
		t.Fatal(err)
	}
	app, err := testimage.WithConfig(busybox, v1.Config{
		Env: []string{"PATH=/bin", "GREETING=from-the-image"}, WorkingDir: "/tmp", User: "65534",
		Cmd: []string{"sh", "-c", `echo "$GREETING $(pwd) $(id -u) $MINE"; exec sleep 3600`},
	})
	if err != nil {
		t.Fatal(err)
	}
	appRef := host + "/team/app:v1"
	if err := testimage.Push(appRef, app, login); err != nil {
		t.Fatal(err)
	}
	appDigest, _ := app.Digest()

	auth := base64.StdEncoding.EncodeToString([]byte(login.Username + ":" + login.Password))
	dockerConfig, _ := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{"auth": auth}}})
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "registry-login"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name, image string, policy corev1.PullPolicy, secret bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			NodeName: o.NodeName, TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "c", Image: image, ImagePullPolicy: policy, Env: []corev1.EnvVar{{Name: "MINE", Value: "from-the-pod"}}}},
		}}
		if secret {
			p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry-login"}}
		}
		return p
	}
	status := func(name string) (corev1.ContainerStatus, bool) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return corev1.ContainerStatus{}, false
		}
		return p.Status.ContainerStatuses[0], true
	}
	waiting := func(name, reason string) {
		t.Helper()
		waitFor(ctx, t, 2*time.Minute, name+" waiting with "+reason, func() (bool, string) {
			s, ok := status(name)
			if !ok || s.State.Waiting == nil {
				return false, fmt.Sprintf("%+v", s.State)
			}
			return s.State.Waiting.Reason == reason, s.State.Waiting.Reason + ": " + s.State.Waiting.Message
		})
	}

	t.Run("pulled with the pod's secret, run as the image says", func(t *testing.T) {
		if _, err := pods.Create(ctx, pod("pulled", appRef, corev1.PullIfNotPresent, true), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, 2*time.Minute, "the pulled pod to run", func() (bool, string) {
			s, _ := status("pulled")
			return s.State.Running != nil, fmt.Sprintf("%+v", s.State)
		})
		s, _ := status("pulled")
		if want := host + "/team/app@" + appDigest.String(); s.ImageID != want || s.Image != appRef {
			t.Errorf("status image %q id %q, want %q and %q", s.Image, s.ImageID, appRef, want)
		}
		waitFor(ctx, t, 30*time.Second, "the container's first line in its log", func() (bool, string) {
			out := kubectlOut(ctx, t, cp, "logs", "pulled")
			return strings.TrimSpace(out) == "from-the-image /tmp 65534 from-the-pod", out
		})
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=pulled"})
		if err != nil {
			t.Fatal(err)
		}
		var reasons []string
		for _, e := range evs.Items {
			reasons = append(reasons, e.Reason)
		}
		if !slices.Contains(reasons, "Pulling") || !slices.Contains(reasons, "Pulled") {
			t.Errorf("events %v, want Pulling and Pulled", reasons)
		}
	})

	t.Run("without the secret: ErrImagePull, then ImagePullBackOff", func(t *testing.T) {
		if _, err := pods.Create(ctx, pod("no-login", host+"/team/app:v2", corev1.PullAlways, false), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waiting("no-login", "ErrImagePull")
		waiting("no-login", "ImagePullBackOff")
	})

	t.Run("not present with pull policy Never: ErrImageNeverPull", func(t *testing.T) {
		if _, err := pods.Create(ctx, pod("never", host+"/team/other:v1", corev1.PullNever, true), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waiting("never", "ErrImageNeverPull")
	})

	t.Run("a pod over its emptyDir sizeLimit is evicted", func(t *testing.T) {
		limit := resource.MustParse("8Mi")
		p := pod("filler", appRef, corev1.PullIfNotPresent, true)
		p.Spec.Volumes = []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}}
		p.Spec.Containers[0].Command = []string{"sh", "-c", "dd if=/dev/zero of=/cache/fill bs=1M count=16 && exec sleep 3600"}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, time.Minute, "the filler Failed, Evicted", func() (bool, string) {
			got, err := pods.Get(ctx, "filler", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return got.Status.Phase == corev1.PodFailed && got.Status.Reason == "Evicted" &&
				got.Status.Message == `Usage of EmptyDir volume "cache" exceeds the limit "8Mi". `, fmt.Sprintf("%s %s %q", got.Status.Phase, got.Status.Reason, got.Status.Message)
		})
	})

	t.Run("an image volume: read-only, layers stacked, subPath, unmounted with the pod", func(t *testing.T) {
		data, err := testimage.Image(v1.Config{}, []testimage.File{{Name: "data/", Mode: 0o755}, {Name: "data/hello.txt", Mode: 0o644, Body: []byte("from-the-volume")}})
		if err != nil {
			t.Fatal(err)
		}
		second, err := testimage.Layer([]testimage.File{{Name: "data/second.txt", Mode: 0o644, Body: []byte("second-layer")}})
		if err != nil {
			t.Fatal(err)
		}
		if data, err = mutate.AppendLayers(data, second); err != nil {
			t.Fatal(err)
		}
		dataRef := host + "/team/data:v1"
		if err := testimage.Push(dataRef, data, login); err != nil {
			t.Fatal(err)
		}
		p := pod("with-volume", appRef, corev1.PullIfNotPresent, true)
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: dataRef, PullPolicy: corev1.PullAlways}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/vol"}, {Name: "data", MountPath: "/sub", SubPath: "data"}}
		p.Spec.Containers[0].Command = []string{"sh", "-c", `echo "$(cat /vol/data/hello.txt) $(cat /sub/second.txt) $(touch /vol/x 2>/dev/null && echo writable || echo read-only)"; exec sleep 3600`}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, 2*time.Minute, "the pod with an image volume to run", func() (bool, string) {
			s, _ := status("with-volume")
			return s.State.Running != nil, fmt.Sprintf("%+v", s.State)
		})
		waitFor(ctx, t, 30*time.Second, "the pod to print what its image volume holds", func() (bool, string) {
			out := kubectlOut(ctx, t, cp, "logs", "with-volume")
			return strings.TrimSpace(out) == "from-the-volume second-layer read-only", out
		})
		mounted := func() int {
			ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (bool, bool) {
				return !strings.Contains(m.Mountpoint, "/volumes/image/data"), false
			})
			if err != nil {
				t.Fatal(err)
			}
			return len(ms)
		}
		if n := mounted(); n == 0 {
			t.Fatal("no image volume mount on the node while the pod runs")
		}
		if err := pods.Delete(ctx, "with-volume", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, time.Minute, "the image volume unmounted with its pod", func() (bool, string) {
			n := mounted()
			return n == 0, fmt.Sprintf("%d mounts left", n)
		})

		// Pulled with the pod's secret or not at all: the pod waits with
		// the image's reason.
		p = pod("volume-no-login", appRef, corev1.PullIfNotPresent, true)
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: host + "/team/missing:v1", PullPolicy: corev1.PullAlways}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/vol"}}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, time.Minute, "the pod waiting for its volume's image", func() (bool, string) {
			s, ok := status("volume-no-login")
			if !ok || s.State.Waiting == nil {
				return false, fmt.Sprintf("%+v", s.State)
			}
			w := s.State.Waiting
			return (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") && strings.Contains(w.Message, "team/missing:v1"), w.Reason + ": " + w.Message
		})
		// Setup is tried every second; the pull, with its events, every 10.
		time.Sleep(11 * time.Second)
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=volume-no-login"})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.Count > 3 {
				t.Errorf("event %s %q sent %d times within 12s", e.Reason, e.Message, e.Count)
			}
		}
	})

	t.Run("the Node lists its images", func(t *testing.T) {
		waitFor(ctx, t, time.Minute, "the Node's status to list the pulled image", func() (bool, string) {
			n, err := cs.CoreV1().Nodes().Get(ctx, o.NodeName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, img := range n.Status.Images {
				if slices.Contains(img.Names, appRef) && img.SizeBytes > 0 {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%v; node info %+v", n.Status.Images, n.Status.NodeInfo)
		})
		n, _ := cs.CoreV1().Nodes().Get(ctx, o.NodeName, metav1.GetOptions{})
		if info := n.Status.NodeInfo; !strings.HasPrefix(info.KubeletVersion, "v1.") || info.OSImage == "" || info.KernelVersion == "" {
			t.Errorf("node info %+v: want the Kubernetes version, OS image and kernel", info)
		}
	})
}
