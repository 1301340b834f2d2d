package agent

import (
	"bufio"
	"bytes"
	"os"
	goruntime "runtime"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/steadyplane/steadyplane/pkg/buildinfo"
	"github.com/steadyplane/steadyplane/pkg/node/images"
)

// maxNodeImages is how many images the Node lists, as the kubelet's
// --node-status-max-images.
const maxNodeImages = 50

// nodeInfo is what the Node says of the machine, as a kubelet reports it:
// the Kubernetes version the agent speaks, the OS image and kernel.
func nodeInfo(runtimeName string) corev1.NodeSystemInfo {
	info := corev1.NodeSystemInfo{
		OperatingSystem: goruntime.GOOS, Architecture: goruntime.GOARCH,
		KubeletVersion:          buildinfo.KubernetesGitVersion(),
		ContainerRuntimeVersion: runtimeName + "://steadyplane",
		OSImage:                 osImage(os.ReadFile),
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		info.KernelVersion = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/etc/machine-id"); err == nil {
		info.MachineID = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		info.BootID = strings.TrimSpace(string(b))
	}
	return info
}

// osImage is the PRETTY_NAME of os-release, as the kubelet shows it.
func osImage(readFile func(string) ([]byte, error)) string {
	for _, p := range []string{"/etc/os-release", "/usr/lib/os-release"} {
		b, err := readFile(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
				return strings.Trim(v, `"'`)
			}
		}
	}
	return "Unknown"
}

// nodeImages lists the store's images as the Node's status does: largest
// first, at most maxNodeImages, each with its names and repository digests.
func nodeImages(imgs []images.Image) []corev1.ContainerImage {
	sort.SliceStable(imgs, func(i, j int) bool { return imgs[i].Size > imgs[j].Size })
	out := make([]corev1.ContainerImage, 0, min(len(imgs), maxNodeImages))
	for _, img := range imgs {
		if len(out) == maxNodeImages {
			break
		}
		names := append(append([]string{}, img.RepoDigests...), img.Names...)
		if len(names) == 0 {
			names = []string{img.ID}
		}
		out = append(out, corev1.ContainerImage{Names: names, SizeBytes: img.Size})
	}
	return out
}
