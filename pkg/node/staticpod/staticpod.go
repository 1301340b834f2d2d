// Package staticpod is static pod manifests: written from a Spec by "up"
// and a worker's "node" (spec.go), read by the node agent as the kubelet
// reads its --pod-manifest-path, with the mirror pods that show them in the
// API (staticpod.go). Parse takes untrusted
// input: a file an operator may have half-written or mistyped is an error
// with the file's name, never a crash.
package staticpod

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	apipod "k8s.io/kubernetes/pkg/api/pod"
	api "k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install" // the core API in legacyscheme
	apiv1 "k8s.io/kubernetes/pkg/apis/core/v1"
	corevalidation "k8s.io/kubernetes/pkg/apis/core/validation"
	"k8s.io/kubernetes/pkg/capabilities"
)

// Annotations of static and mirror pods, as the kubelet writes them.
const (
	HashAnnotation   = "kubernetes.io/config.hash"
	SourceAnnotation = "kubernetes.io/config.source"
	MirrorAnnotation = "kubernetes.io/config.mirror"
)

// MaxManifestSize is the largest manifest read; a larger file is refused.
const MaxManifestSize = 1 << 20

// AllowPrivileged sets the kubelet's policy for this process: a node runs
// privileged pods (kube-proxy's, a CNI's); whether a user may create one
// is the API server's admission (--allow-privileged, Pod Security), not
// the node's. Without it Parse refuses privileged containers. It is the
// node agent's to call: the setting is per process, once, and the API
// server in the same binary sets its own.
func AllowPrivileged() {
	capabilities.Initialize(capabilities.Capabilities{AllowPrivileged: true})
}

// Parse reads a manifest for node: one v1 Pod in YAML or JSON, decoded,
// defaulted and validated as the kubelet does (upstream's ValidatePodCreate;
// no references to API objects, which a static pod cannot resolve without
// an API server). The pod is named <name>-<node> in its namespace (default
// "default"), and its UID is the hash of the manifest and node, so an edit
// makes a new pod.
func Parse(data []byte, nodeName string) (*corev1.Pod, error) {
	if len(data) > MaxManifestSize {
		return nil, fmt.Errorf("manifest is %d bytes, over the %d limit", len(data), MaxManifestSize)
	}
	js, err := utilyaml.ToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %v", err)
	}
	obj, gvk, err := legacyscheme.Codecs.UniversalDecoder().Decode(js, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %v", err)
	}
	pod, ok := obj.(*api.Pod)
	if !ok {
		return nil, fmt.Errorf("manifest holds a %s, not a v1 Pod", gvk.Kind)
	}
	if errs := validation.IsDNS1123Subdomain(pod.Name); len(errs) > 0 {
		return nil, fmt.Errorf("pod name %q: %s", pod.Name, strings.Join(errs, "; "))
	}
	for _, c := range append(append([]api.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if len(c.Command) == 0 {
			return nil, fmt.Errorf("container %q of pod %s has no command (the node agent runs commands, not images)", c.Name, pod.Name)
		}
	}
	hash := Hash(data, nodeName)
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Name = pod.Name + "-" + nodeName
	pod.UID = types.UID(hash)
	pod.Spec.NodeName = nodeName
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[HashAnnotation] = hash
	pod.Annotations[SourceAnnotation] = "file"
	pod.ResourceVersion, pod.Status = "", api.PodStatus{}
	opts := apipod.GetValidationOptionsFromPodSpecAndMeta(&pod.Spec, nil, &pod.ObjectMeta, nil)
	if errs := corevalidation.ValidatePodCreate(pod, opts); len(errs) > 0 {
		return nil, fmt.Errorf("invalid pod: %v", errs.ToAggregate())
	}
	if _, resource, err := apipod.HasAPIObjectReference(pod); err != nil {
		return nil, err
	} else if resource != "" {
		return nil, fmt.Errorf("static pods may not reference %s: they run without an API server", resource)
	}
	out := &corev1.Pod{}
	if err := apiv1.Convert_core_Pod_To_v1_Pod(pod, out, nil); err != nil {
		return nil, fmt.Errorf("converting the pod: %w", err)
	}
	return out, nil
}

// Hash identifies a manifest's content on a node.
func Hash(data []byte, nodeName string) string {
	h := sha256.New()
	h.Write(data)
	h.Write([]byte{0})
	h.Write([]byte(nodeName))
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// Mirror returns the mirror pod of a static pod: the API's read-only copy,
// owned by its Node (the NodeRestriction admission plugin requires that).
func Mirror(static *corev1.Pod, nodeName string, nodeUID types.UID) *corev1.Pod {
	m := static.DeepCopy()
	m.UID, m.ResourceVersion = "", ""
	m.Annotations[MirrorAnnotation] = static.Annotations[HashAnnotation]
	m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: nodeUID, Controller: ptrTrue()}}
	return m
}

func ptrTrue() *bool { t := true; return &t }

// Result is what LoadDir found in one file.
type Result struct {
	File string
	Pod  *corev1.Pod
	Err  error
	Hash string // of the content, also for a file that did not parse
}

// LoadDir parses every .yaml, .yml and .json file of dir, sorted by name;
// hidden files and others are skipped.
func LoadDir(dir, nodeName string) ([]Result, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, e := range entries {
		name := e.Name()
		ext := filepath.Ext(name)
		if e.IsDir() || strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		path := filepath.Join(dir, name)
		r := Result{File: path}
		data, err := readLimited(path)
		if err != nil {
			r.Err = err
		} else {
			r.Hash = Hash(data, nodeName)
			r.Pod, r.Err = Parse(data, nodeName)
		}
		if r.Err != nil {
			r.Err = fmt.Errorf("%s: %w", path, r.Err)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out, nil
}

// readLimited reads a manifest that is a regular file, at most
// MaxManifestSize bytes of it. A link, FIFO, device or directory is refused
// without being opened for reading in a way that could block.
func readLimited(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, errors.New("a symbolic link, not a regular file")
		}
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", st.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxManifestSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxManifestSize {
		return nil, fmt.Errorf("manifest is over the %d-byte limit", MaxManifestSize)
	}
	return data, nil
}

// Refusal is a manifest file that does not become a pod, and why.
type Refusal struct {
	File string
	Hash string
	Err  error
}

// Desired decides which static pods the manifests ask for, by pod full name
// (namespace/name), and which file defines each. owners are the files that
// defined each running pod: when two files define one name, the one already
// running keeps it and the newcomer is refused; otherwise the first file by
// name wins. Every file that did not parse is refused too. A pod whose file
// became invalid is not desired any more, so the pod it replaced stops, as
// with the kubelet.
func Desired(results []Result, owners map[string]string) (pods map[string]*corev1.Pod, files map[string]string, refused []Refusal) {
	pods, files = map[string]*corev1.Pod{}, map[string]string{}
	byName := map[string][]Result{}
	var names []string
	for _, r := range results {
		if r.Err != nil {
			refused = append(refused, Refusal{File: r.File, Hash: r.Hash, Err: r.Err})
			continue
		}
		key := types.NamespacedName{Namespace: r.Pod.Namespace, Name: r.Pod.Name}.String()
		if _, seen := byName[key]; !seen {
			names = append(names, key)
		}
		byName[key] = append(byName[key], r)
	}
	for _, key := range names {
		rs := byName[key]
		winner := 0
		for i, r := range rs {
			if r.File == owners[key] {
				winner = i
			}
		}
		pods[key], files[key] = rs[winner].Pod, rs[winner].File
		for i, r := range rs {
			if i != winner {
				refused = append(refused, Refusal{File: r.File, Hash: r.Hash, Err: fmt.Errorf("%s: pod %s is already defined by %s", r.File, key, rs[winner].File)})
			}
		}
	}
	return pods, files, refused
}
