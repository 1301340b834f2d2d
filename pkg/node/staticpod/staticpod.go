// Package staticpod reads static pod manifests (the kubelet's
// --pod-manifest-path) and builds their mirror pods. Parse takes untrusted
// input: a file an operator may have half-written or mistyped is an error
// with the file's name, never a crash.
package staticpod

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/scheme"
)

// Annotations of static and mirror pods, as the kubelet writes them.
const (
	HashAnnotation   = "kubernetes.io/config.hash"
	SourceAnnotation = "kubernetes.io/config.source"
	MirrorAnnotation = "kubernetes.io/config.mirror"
)

// MaxManifestSize is the largest manifest read; a larger file is refused.
const MaxManifestSize = 1 << 20

// Parse reads a manifest for node: one v1 Pod in YAML or JSON. The pod is
// named <name>-<node> in its namespace (default "default"), and its UID is
// the hash of the manifest and node, so an edit makes a new pod.
func Parse(data []byte, nodeName string) (*corev1.Pod, error) {
	if len(data) > MaxManifestSize {
		return nil, fmt.Errorf("manifest is %d bytes, over the %d limit", len(data), MaxManifestSize)
	}
	obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %v", err)
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("manifest holds a %s, not a v1 Pod", gvk.Kind)
	}
	if errs := validation.IsDNS1123Subdomain(pod.Name); len(errs) > 0 {
		return nil, fmt.Errorf("pod name %q: %s", pod.Name, strings.Join(errs, "; "))
	}
	if len(pod.Spec.Containers) == 0 {
		return nil, fmt.Errorf("pod %s has no containers", pod.Name)
	}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.Name == "" {
			return nil, fmt.Errorf("pod %s has a container without a name", pod.Name)
		}
		if len(c.Command) == 0 {
			return nil, fmt.Errorf("container %s of pod %s has no command (the node agent runs commands, not images)", c.Name, pod.Name)
		}
	}
	hash := Hash(data, nodeName)
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Name = pod.Name + "-" + nodeName
	pod.UID = types.UID(hash)
	pod.Spec.NodeName = nodeName
	if pod.Spec.RestartPolicy == "" {
		pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[HashAnnotation] = hash
	pod.Annotations[SourceAnnotation] = "file"
	pod.ResourceVersion, pod.Status = "", corev1.PodStatus{}
	return pod, nil
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

func readLimited(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > MaxManifestSize {
		return nil, fmt.Errorf("manifest is %d bytes, over the %d limit", st.Size(), MaxManifestSize)
	}
	return os.ReadFile(path)
}
