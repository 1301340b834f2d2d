// Package metricsapi is the cluster's resource metrics API, metrics.k8s.io:
// metrics-server (sigs.k8s.io/metrics-server, compiled into steadyplane as
// "steadyplane metrics-server", server.go) deployed in kube-system as its
// project's manifest deploys it, from the image of the steadyplane binary,
// and registered with the API servers' aggregation layer. It scrapes every
// node agent's /metrics/resource (package node/stats), so that kubectl top
// and the HorizontalPodAutoscaler work.
//
// Two things differ from the upstream manifest: the APIService is verified
// (its caBundle is the cluster CA, which signs metrics-server's serving
// certificate, Secret metrics-server-tls), and metrics-server reaches the
// API servers through the alternative-services kubeconfig CoreDNS uses, not
// through the kubernetes Service, and verifies the node agents' serving
// certificates with their CA.
//
// Config in, objects out: Objects is a pure function of Config; "up" writes
// them as it writes CoreDNS's (coredns.Apply).
package metricsapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/rbacutil"
)

// Names of what Objects makes, in kube-system, as metrics-server's own
// manifest names them.
const (
	Namespace = metav1.NamespaceSystem
	// Name is the add-on's (up --disable metrics-server), its Deployment's,
	// Service's and service account's.
	Name = "metrics-server"
	// APIServiceName is the group version it serves.
	APIServiceName = "v1beta1.metrics.k8s.io"
	// RoleName is the ClusterRole of its service account: read nodes and
	// pods, and the node agents' metrics.
	RoleName = "system:metrics-server"
	// ReaderRoleName is aggregated into view, edit and admin: whoever may
	// see a namespace's pods may see their usage.
	ReaderRoleName = "system:aggregated-metrics-reader"
	// SecretName holds its serving certificate and key.
	SecretName = "metrics-server-tls"
	// AppLabel selects its pods (k8s-app: metrics-server, as upstream).
	AppLabel = "metrics-server"
)

// Port is the HTTPS port metrics-server listens on in its pod (the
// upstream manifest's; the pod has its own network namespace).
const Port = 10250

// Resolution is how often metrics-server scrapes every node agent: the
// newest sample kubectl top and the HPA see is at most this old (plus a
// scrape). Upstream's manifest sets 15 s, its minimum is 10 s.
const Resolution = 15 * time.Second

// Where the pod finds its files.
const (
	configDir      = "/etc/metrics-server/config"
	kubeconfigPath = configDir + "/kubeconfig"
	nodeCAPath     = configDir + "/node-ca.crt"
	// tlsDir is beside configDir, not in it: a mount point cannot be
	// made inside a read-only volume.
	tlsDir = "/etc/metrics-server/tls"
)

// Config is what the metrics API is made of.
type Config struct {
	// Image runs "steadyplane metrics-server" (an image of the
	// steadyplane binary); it is on the node already, never pulled.
	Image string
	// APIServer is the URL metrics-server reaches the API servers at,
	// failing over between Alternatives (host:port, every API server), as
	// CoreDNS does; "" for client-go's in-cluster configuration.
	APIServer    string
	Alternatives []string
	// NodeCA is the CA of the node agents' serving certificates (PEM).
	NodeCA []byte
	// ServingCA is the CA that signs the serving certificate of Secret
	// SecretName (PEM): the APIService's caBundle.
	ServingCA []byte
}

// ServiceDNSNames are the names the aggregation layer reaches
// metrics-server by: its serving certificate holds them.
func ServiceDNSNames(clusterDomain string) []string {
	svc := Name + "." + Namespace + ".svc"
	return []string{svc, svc + "." + clusterDomain}
}

// Args are metrics-server's flags in its pod.
func Args(c Config) []string {
	args := []string{Name,
		"--secure-port=" + strconv.Itoa(Port),
		"--tls-cert-file=" + tlsDir + "/" + corev1.TLSCertKey,
		"--tls-private-key-file=" + tlsDir + "/" + corev1.TLSPrivateKeyKey,
		// The node agents are dialled at their InternalIP, on the port
		// each Node reports, and must prove themselves with their CA.
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-use-node-status-port",
		"--kubelet-certificate-authority=" + nodeCAPath,
		"--metric-resolution=" + Resolution.String(),
	}
	if c.APIServer != "" {
		for _, f := range []string{"kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig"} {
			args = append(args, "--"+f+"="+kubeconfigPath)
		}
	}
	return args
}

// Objects are the metrics API's objects: the service account and its
// RBAC (the upstream manifest's), the kubeconfig and the nodes' CA, the
// Deployment, the Service and the APIService. The serving certificate's
// Secret is written apart (ServingSecret), only when it must change.
func Objects(c Config) ([]any, error) {
	labels := map[string]string{"k8s-app": AppLabel, "app.kubernetes.io/managed-by": "steadyplane"}
	selector := map[string]string{"k8s-app": AppLabel}
	sa := rbacutil.ServiceAccount(Namespace, Name)
	reader := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ReaderRoleName, Labels: map[string]string{
			"app.kubernetes.io/managed-by":                 "steadyplane",
			"rbac.authorization.k8s.io/aggregate-to-admin": "true",
			"rbac.authorization.k8s.io/aggregate-to-edit":  "true",
			"rbac.authorization.k8s.io/aggregate-to-view":  "true"}},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"metrics.k8s.io"}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}}},
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: RoleName, Labels: rbacutil.ManagedBy},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	binding := rbacutil.ServiceAccountClusterBinding(RoleName, RoleName, Namespace, Name)
	// As every extension API server: it asks the API servers who a
	// request's user is and what they may do, and reads the front proxy's
	// CA from kube-system/extension-apiserver-authentication.
	delegator := rbacutil.ServiceAccountClusterBinding(Name+":system:auth-delegator", "system:auth-delegator", Namespace, Name)
	authReader := rbacutil.NamedServiceAccountBinding(Name+"-auth-reader", "extension-apiserver-authentication-reader", Namespace, Name)
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: Namespace, Labels: labels},
		Data:       map[string]string{"node-ca.crt": string(c.NodeCA)}}
	if c.APIServer != "" {
		kc, err := altsvcclient.PodKubeconfig(c.APIServer, c.Alternatives, Name, kubeconfigPath)
		if err != nil {
			return nil, err
		}
		cm.Data["kubeconfig"] = kc
	}
	sum := sha256.Sum256([]byte(cm.Data["kubeconfig"] + cm.Data["node-ca.crt"]))
	svc := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: Namespace, Labels: labels},
		Spec: corev1.ServiceSpec{Selector: selector,
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("https")}}},
	}
	apiService := &apiregistrationv1.APIService{TypeMeta: metav1.TypeMeta{APIVersion: "apiregistration.k8s.io/v1", Kind: "APIService"},
		ObjectMeta: metav1.ObjectMeta{Name: APIServiceName, Labels: labels},
		Spec: apiregistrationv1.APIServiceSpec{
			Service: &apiregistrationv1.ServiceReference{Namespace: Namespace, Name: Name, Port: ptr.To[int32](443)},
			Group:   "metrics.k8s.io", Version: "v1beta1",
			CABundle:             c.ServingCA,
			GroupPriorityMinimum: 100, VersionPriority: 100,
		},
	}
	return []any{sa, reader, role, binding, delegator, authReader, cm, deployment(c, labels, selector, hex.EncodeToString(sum[:8])), svc, apiService}, nil
}

// deployment is metrics-server's Deployment: one pod, rolled when its
// configuration changes (configHash), with the upstream manifest's probes,
// requests and confinement.
func deployment(c Config, labels, selector map[string]string, configHash string) *appsv1.Deployment {
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("https"), Scheme: corev1.URISchemeHTTPS}},
			PeriodSeconds: 10, FailureThreshold: 3}
	}
	readiness := probe("/readyz")
	// Ready after its second scrape; polled often so that the APIService
	// turns Available as soon as it is (three misses in a row, as upstream,
	// before it leaves the Service).
	readiness.PeriodSeconds = 2
	return &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr.To(intstr.FromInt(0)), MaxSurge: ptr.To(intstr.FromInt(1))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"steadyplane.io/config-sha256": configHash}},
				Spec: corev1.PodSpec{
					ServiceAccountName: Name,
					PriorityClassName:  "system-cluster-critical",
					NodeSelector:       map[string]string{"kubernetes.io/os": "linux"},
					Tolerations: []corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
						{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}},
					Volumes: []corev1.Volume{
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: Name}}}},
						{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: SecretName, DefaultMode: ptr.To[int32](0o440)}}},
					},
					SecurityContext: &corev1.PodSecurityContext{FSGroup: ptr.To[int64](1000)},
					Containers: []corev1.Container{{
						Name: Name, Image: c.Image, ImagePullPolicy: corev1.PullNever,
						Args:  Args(c),
						Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: Port, Protocol: corev1.ProtocolTCP}},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("200Mi")},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: configDir, ReadOnly: true},
							{Name: "tls", MountPath: tlsDir, ReadOnly: true}},
						LivenessProbe:  probe("/livez"),
						ReadinessProbe: readiness,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000),
							Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						},
					}},
				},
			},
		},
	}
}

// ServingSecret is the Secret of metrics-server's serving certificate and
// key (PEM).
func ServingSecret(certPEM, keyPEM []byte) *corev1.Secret {
	return &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: Namespace, Labels: map[string]string{"k8s-app": AppLabel, "app.kubernetes.io/managed-by": "steadyplane"}},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}
}

// String is the add-on's one-line description, for up's progress.
func (c Config) String() string {
	return fmt.Sprintf("Deployment %s/%s, APIService %s, every %s", Namespace, Name, APIServiceName, Resolution)
}
