// Package v1alpha1 is the operator.steadyplane.io/v1alpha1 API: the
// cluster-scoped KubeAPIServer object "cluster" through which a user changes
// the API server's configuration and watches its revisions roll out, fall
// back and retry.
package v1alpha1

import (
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
}

// KubeAPIServerStatus is what the operator observed.
type KubeAPIServerStatus struct {
	// LatestAvailableRevision is the newest revision made.
	LatestAvailableRevision int32 `json:"latestAvailableRevision,omitempty"`
	// NodeStatuses is one entry per control-plane node.
	NodeStatuses []NodeStatus `json:"nodeStatuses,omitempty"`
	// Conditions are Available, Progressing and Degraded.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
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
