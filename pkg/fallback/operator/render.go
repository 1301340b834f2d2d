package operator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/revisions"
)

// The ConfigMaps of templates "steadyplane up" writes, one per control-plane
// node (TemplatesName), and their keys: the pods every revision is made from
// on that node. They hold what only the node knows (paths, addresses, ports,
// the binary), so that the operator does not.
const (
	TemplatesPrefix = "kube-apiserver-templates-"
	OperandKey      = "operand.yaml"
	MonitorKey      = "startup-monitor.yaml"
	InstallerKey    = "installer.yaml"
)

// TemplatesName is the name of node's templates ConfigMap.
func TemplatesName(node string) string { return TemplatesPrefix + node }

// A revision in the API is what the user asked for, the same on every node:
// ConfigMap kube-apiserver-pod-<N> holding the spec, with the user's
// ConfigMaps and Secrets copied as <name>-<N>. Its rendering for a node
// (RenderingName), made from that node's templates when the revision is
// installed there, holds the two manifests.
const (
	// RevisionSpecKey is the revision's spec, as JSON.
	RevisionSpecKey = "spec.json"
	// RevisionOperandKey and RevisionMonitorKey are a rendering's manifests.
	RevisionOperandKey = "kube-apiserver-pod.yaml"
	RevisionMonitorKey = "startup-monitor-pod.yaml"
	// RevisionLabel marks a revision's objects with its number.
	RevisionLabel = "operator.steadyplane.io/revision"
	// NodeLabel marks templates, renderings and installer pods with their
	// node.
	NodeLabel = "operator.steadyplane.io/node"
	// InputHashAnnotation is the hash of what the revision was made from
	// (Inputs.Hash): a change makes a new revision.
	InputHashAnnotation = "operator.steadyplane.io/input-hash"
	// TemplatesHashAnnotation, on a rendering, is the hash of the node's
	// templates it was made from (TemplatesHash): when the node's templates
	// change, a new revision carries the change to the nodes.
	TemplatesHashAnnotation = "operator.steadyplane.io/templates-hash"
	// ConfigMapsAnnotation and SecretsAnnotation list the user's objects
	// copied, as a JSON array of names.
	ConfigMapsAnnotation = "operator.steadyplane.io/configmaps"
	SecretsAnnotation    = "operator.steadyplane.io/secrets"
	// CauseAnnotation says why the revision was made.
	CauseAnnotation = "operator.steadyplane.io/cause"
)

// ResourcesVolume is the operand template's hostPath volume of the
// resources directory; a revision points it at its own directory and mounts
// it at ResourcesMountPath.
const (
	ResourcesVolume    = "static-pod-resources"
	ResourcesMountPath = "/etc/kubernetes/static-pod-resources"
)

// RevisionName is the name of revision n's ConfigMap of operand.
func RevisionName(operand string, n int32) string { return fmt.Sprintf("%s-pod-%d", operand, n) }

// RenderingName is the name of revision n's rendering for node.
func RenderingName(operand string, n int32, node string) string {
	return fmt.Sprintf("%s-pod-%d-%s", operand, n, node)
}

// CopyName is the name of revision n's copy of the user's object name.
func CopyName(name string, n int32) string { return name + "-" + strconv.Itoa(int(n)) }

// Inputs is everything a revision is made from.
type Inputs struct {
	// Spec is the KubeAPIServer's spec.
	Spec v1alpha1.KubeAPIServerSpec
	// ConfigMaps and Secrets are the user's objects' data, by name.
	ConfigMaps map[string]map[string]string
	Secrets    map[string]map[string][]byte
	// ConfigMapsBinary is the user's ConfigMaps' binaryData, by name; left
	// out of the hash when empty so that revisions made before it existed
	// keep their hash (and are not remade).
	ConfigMapsBinary map[string]map[string][]byte `json:",omitempty"`
}

// Hash identifies the inputs: equal inputs make equal revisions, so a new
// revision is made when the hash changes (or for a retry, or when a node's
// templates changed).
func (in Inputs) Hash() string { return hashJSON(in) }

// TemplatesHash identifies a node's templates (its ConfigMap's data).
func TemplatesHash(data map[string]string) string { return hashJSON(data) }

func hashJSON(v any) string {
	// encoding/json sorts map keys: the same inputs always hash the same.
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps of strings and bytes always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Templates are the parsed templates.
type Templates struct {
	Operand, Monitor, Installer *corev1.Pod
}

// ParseTemplates parses a templates ConfigMap's data.
func ParseTemplates(data map[string]string) (Templates, error) {
	var t Templates
	for key, dst := range map[string]**corev1.Pod{OperandKey: &t.Operand, MonitorKey: &t.Monitor, InstallerKey: &t.Installer} {
		pod, err := revisions.DecodeManifest([]byte(data[key]))
		if err != nil {
			return t, fmt.Errorf("template %s: %w", key, err)
		}
		if len(pod.Spec.Containers) != 1 {
			return t, fmt.Errorf("template %s: %d containers, want 1", key, len(pod.Spec.Containers))
		}
		*dst = pod
	}
	return t, nil
}

// RenderOperand is revision n of the operand: the template with the
// revision annotation and the spec's extra arguments and, when the spec
// names ConfigMaps or Secrets, the revision's directory mounted read-only
// at ResourcesMountPath.
func RenderOperand(t Templates, spec v1alpha1.KubeAPIServerSpec, n int32) (*corev1.Pod, error) {
	pod := t.Operand.DeepCopy()
	setRevision(pod, n)
	c := &pod.Spec.Containers[0]
	c.Command = append(c.Command, spec.ExtraArgs...)
	if len(spec.ConfigMaps)+len(spec.Secrets) == 0 {
		return pod, nil
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.Name == ResourcesVolume && v.HostPath != nil {
			v.HostPath.Path = filepath.Join(v.HostPath.Path, RevisionName(pod.Name, n))
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: ResourcesVolume, MountPath: ResourcesMountPath, ReadOnly: true})
			return pod, nil
		}
	}
	return nil, fmt.Errorf("operand template has no hostPath volume %q for the revision's files", ResourcesVolume)
}

// RenderMonitor is revision n's startup monitor.
func RenderMonitor(t Templates, n int32) *corev1.Pod {
	pod := t.Monitor.DeepCopy()
	setRevision(pod, n)
	c := &pod.Spec.Containers[0]
	c.Command = append(c.Command, "--revision="+strconv.Itoa(int(n)))
	return pod
}

// RenderInstaller is the pod that installs revision n on node.
func RenderInstaller(t Templates, node string, n, lastFailed int32, withMonitor bool) *corev1.Pod {
	pod := t.Installer.DeepCopy()
	pod.Name = InstallerName(node, n)
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[RevisionLabel] = strconv.Itoa(int(n))
	pod.Labels[NodeLabel] = node
	pod.Spec.NodeName = node
	c := &pod.Spec.Containers[0]
	c.Command = append(c.Command, "--revision="+strconv.Itoa(int(n)), "--node-name="+node,
		"--last-failed-revision="+strconv.Itoa(int(lastFailed)), "--startup-monitor="+strconv.FormatBool(withMonitor))
	return pod
}

// InstallerName names the installer pod of revision n on node.
func InstallerName(node string, n int32) string { return fmt.Sprintf("installer-%d-%s", n, node) }

func setRevision(pod *corev1.Pod, n int32) {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[fallback.RevisionAnnotation] = strconv.Itoa(int(n))
}
