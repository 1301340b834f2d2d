package podworker

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/kubelet/network/dns"

	"github.com/steadyplane/steadyplane/pkg/node/localstatus"
	"github.com/steadyplane/steadyplane/pkg/node/podnet"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/volume"
)

// Host is what a pod worker asks of its node agent, which knows the API
// and the other pods: the worker's whole contract with it. The node agent
// is one; the worker's tests run on fakes.
type Host interface {
	// Event records an event about pod (on its mirror pod for a static
	// pod).
	Event(pod *corev1.Pod, eventType, reason, format string, args ...any)
	// PatchStatus writes the status of the API object that stands for pod
	// (the pod itself, or a static pod's mirror pod; nothing until it
	// exists) as statusOf makes it from that object, by upstream's
	// PatchPodStatus (a two-way strategic merge patch, UID precondition):
	// conditions written by others are in neither side of the diff, so
	// never touched. It returns the patch and whether nothing changed (then
	// nothing was sent).
	PatchStatus(ctx context.Context, pod *corev1.Pod, statusOf func(target *corev1.Pod) corev1.PodStatus) (patch []byte, unchanged bool, err error)
	// RemovePod deletes a terminated pod from the API for good (grace 0,
	// UID precondition).
	RemovePod(ctx context.Context, pod *corev1.Pod) error
	// Requested sums the requests of the pods the node runs, but the one
	// of UID except, as their resources were allocated.
	Requested(except types.UID) corev1.ResourceList
	// ServiceEnv returns the service variables of pod's containers
	// (ServiceEnvVars of the Services the agent knows); static says it is a
	// static pod, which may start before any API server.
	ServiceEnv(pod *corev1.Pod, static bool) (map[string]string, error)
}

// Node is the node a worker's pod runs on: its settings and what every
// worker of the node shares.
type Node struct {
	// Name is the Node's; IP its address, and the address of host-network
	// pods.
	Name, IP string
	// Runtime runs the containers; Network gives pods their own network
	// namespace an address (nil: every pod on the host's network).
	Runtime runtime.Runtime
	Network *podnet.Network
	// RootDir holds the pods' directories and container logs.
	RootDir string
	// StopPodsOnExit stops every container when the agent stops, and makes
	// containers die with an agent that crashes.
	StopPodsOnExit bool
	// PodPidsLimit caps each container's processes (0: none);
	// SeccompDefault gives containers with no seccomp profile
	// RuntimeDefault.
	PodPidsLimit   int64
	SeccompDefault bool
	// ClusterDomain is the cluster's DNS domain: pods' search path and
	// subdomains.
	ClusterDomain string
	// Allocatable is what the node offers pods.
	Allocatable corev1.ResourceList
	// Images gets containers their images; nil on a node without an image
	// store (only host roots run there).
	Images *ImageService
	// Volumes reads the ConfigMaps, Secrets and tokens of API volumes and
	// env; nil on a node without an API (static pods get none).
	Volumes volume.Source
	// DNS makes pods' resolv.conf by their dnsPolicy.
	DNS *dns.Configurer
	// Local is the node's own record of its pods, served read-only.
	Local *localstatus.Store
}
