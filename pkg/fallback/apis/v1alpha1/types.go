// Package v1alpha1 is the operator.steadyplane.io/v1alpha1 API: the
// cluster-scoped KubeAPIServer object "cluster" through which a user changes
// the API server's configuration and watches its revisions roll out, fall
// back and retry.
package v1alpha1

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group, Version and the resource of the API.
const (
	Group    = "operator.steadyplane.io"
	Version  = "v1alpha1"
	Kind     = "KubeAPIServer"
	Resource = "kubeapiservers"
	// Name is the one object there is.
	Name = "cluster"
	// Namespace holds the user's ConfigMaps and Secrets named in the spec,
	// and the revisions made of them.
	Namespace = "steadyplane-system"
)

// GroupVersionResource of KubeAPIServer, for dynamic clients.
var GroupVersionResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// Condition types on the status.
const (
	// ConditionAvailable: an API server runs a revision on some node.
	ConditionAvailable = "Available"
	// ConditionProgressing: a node is installing or starting a revision.
	ConditionProgressing = "Progressing"
	// ConditionDegraded: a node fell back from its newest revision; reason
	// and message are the startup monitor's.
	ConditionDegraded = "Degraded"
)

// KubeAPIServer is the API server's configuration and its rollout.
type KubeAPIServer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KubeAPIServerSpec   `json:"spec,omitempty"`
	Status KubeAPIServerStatus `json:"status,omitempty"`
}

// KubeAPIServerSpec is what the user changes; every change is a new revision.
type KubeAPIServerSpec struct {
	// ExtraArgs are appended to the API server's arguments.
	ExtraArgs []string `json:"extraArgs,omitempty"`
	// ConfigMaps are names of ConfigMaps in steadyplane-system, copied into
	// each revision and mounted at
	// /etc/kubernetes/static-pod-resources/configmaps/<name>/<key>.
	ConfigMaps []string `json:"configMaps,omitempty"`
	// Secrets are names of Secrets in steadyplane-system, mounted at
	// /etc/kubernetes/static-pod-resources/secrets/<name>/<key> (0600).
	Secrets []string `json:"secrets,omitempty"`
	// Release is the steadyplane release the cluster runs: the operator
	// rolls it over the servers one at a time, then the workers. Nil
	// leaves every node on the binary it runs. It makes no revision of
	// its own: a server's move renders its templates anew, and that
	// revision is the one its startup monitor watches.
	Release *Release `json:"release,omitempty"`
}

// Release names one steadyplane binary by its content.
type Release struct {
	// Version is the binary's release (steadyplane version).
	Version string `json:"version"`
	// Digest is "sha256:<hex>" of the binary: a node runs only a binary
	// of this digest, whichever server it fetched it from.
	Digest string `json:"digest"`
}

// String is version@digest, the form of the Node annotations.
func (r Release) String() string { return r.Version + "@" + r.Digest }

// ReleaseOf reads a version@digest back; a string without "@" is a
// version alone.
func ReleaseOf(s string) Release {
	v, d, _ := strings.Cut(s, "@")
	return Release{Version: v, Digest: d}
}

// KubeAPIServerStatus is what the operator observed.
type KubeAPIServerStatus struct {
	// LatestAvailableRevision is the newest revision made.
	LatestAvailableRevision int32 `json:"latestAvailableRevision,omitempty"`
	// NodeStatuses is one entry per control-plane node.
	NodeStatuses []NodeStatus `json:"nodeStatuses,omitempty"`
	// Conditions are Available, Progressing and Degraded.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Release is the rollout of spec.release, nil when there is none.
	Release *ReleaseStatus `json:"release,omitempty"`
}

// ReleaseStatus is the rollout of a release over the nodes.
type ReleaseStatus struct {
	// Release is the release rolled.
	Release `json:",inline"`
	// StartTime is when the operator first asked a node to move to it,
	// CompletionTime when every node ran it.
	StartTime      *metav1.Time `json:"startTime,omitempty"`
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Nodes are every node's release, servers first.
	Nodes []NodeRelease `json:"nodes,omitempty"`
	// Conditions are Progressing (a node is moving, or one is still to)
	// and Degraded (the release failed on a node, which went back: the
	// rollout stops there).
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodeRelease is one node's release.
type NodeRelease struct {
	// NodeName is the node; Server says it runs a control plane.
	NodeName string `json:"nodeName"`
	Server   bool   `json:"server,omitempty"`
	// Release is the release it runs (version@digest).
	Release string `json:"release,omitempty"`
	// Target is the release it was asked to move to and has not reached.
	Target string `json:"target,omitempty"`
	// Failed is the newest release it could not start, Reason and
	// Message why (the component and what it said).
	Failed  string `json:"failed,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Asked is when the operator asked it to move to the release rolled,
	// Moved when it first saw it healthy on it.
	Asked *metav1.Time `json:"asked,omitempty"`
	Moved *metav1.Time `json:"moved,omitempty"`
}

// NodeStatus is the rollout on one node.
type NodeStatus struct {
	// NodeName is the node.
	NodeName string `json:"nodeName"`
	// CurrentRevision is the revision its API server runs.
	CurrentRevision int32 `json:"currentRevision,omitempty"`
	// TargetRevision is the revision being installed or started; 0 when
	// none is.
	TargetRevision int32 `json:"targetRevision,omitempty"`
	// LastFailedRevision is the newest revision the node fell back from.
	LastFailedRevision int32 `json:"lastFailedRevision,omitempty"`
	// LastFailedReason is the startup monitor's reason for that fallback.
	LastFailedReason string `json:"lastFailedReason,omitempty"`
	// LastFailedTime is when the operator saw that fallback.
	LastFailedTime *metav1.Time `json:"lastFailedTime,omitempty"`
	// LastFallbackCount counts the fallbacks since the node last rolled
	// out a revision successfully; it sets the retry backoff.
	LastFallbackCount int32 `json:"lastFallbackCount,omitempty"`
	// LastFailedRevisionErrors are the startup monitor's messages.
	LastFailedRevisionErrors []string `json:"lastFailedRevisionErrors,omitempty"`
}

// The annotations on a Node through which the operator and the node's
// steadyplane (up on a server, node on a worker) roll a release: the
// operator writes the target, the node the rest.
const (
	// ReleaseTargetAnnotation is the release (version@digest) the node is
	// asked to move to.
	ReleaseTargetAnnotation = "release.steadyplane.io/target"
	// ReleaseRunningAnnotation is the release the node runs, written once
	// it is up on it.
	ReleaseRunningAnnotation = "release.steadyplane.io/running"
	// ReleaseFailedAnnotation is the newest release the node could not
	// start and went back from; ReleaseFailedReasonAnnotation and
	// ReleaseFailedMessageAnnotation say why.
	ReleaseFailedAnnotation        = "release.steadyplane.io/failed"
	ReleaseFailedReasonAnnotation  = "release.steadyplane.io/failed-reason"
	ReleaseFailedMessageAnnotation = "release.steadyplane.io/failed-message"
	// ReleaseSettlingAnnotation is the release the node runs while it
	// settles on it: up on a move's first start watches its components
	// for a while (a crash loop hands back) before the move counts as
	// done. The operator moves no other node meanwhile.
	ReleaseSettlingAnnotation = "release.steadyplane.io/settling"
)
