// Package coredns is the cluster's DNS: CoreDNS (its kubernetes, forward,
// cache, errors, health, ready, loop and prometheus plugins, compiled into
// steadyplane as "steadyplane dns", package coredns/server) deployed in
// kube-system as the kubeadm add-on is, behind the kube-dns Service at the
// tenth address of the service range, from the image of the steadyplane
// binary (image.go). A server decides its DNS in Plan (server.go); a worker
// finds the cluster's in Find (apply.go); the node's resolver file is
// chosen in resolv.go.
//
// Config in, objects out: Objects is a pure function of Config, Apply
// writes them with server-side apply, so a second "up" (a new binary, a new
// upstream) changes exactly what changed.
package coredns

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	netutils "k8s.io/utils/net"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"

	"github.com/steadyplane/steadyplane/pkg/rbacutil"
)

// Names of what Objects makes, in kube-system, as kubeadm names them.
const (
	Namespace   = metav1.NamespaceSystem
	ServiceName = "kube-dns"
	Name        = "coredns"
	// RoleName is the ClusterRole of CoreDNS's service account.
	RoleName = "system:coredns"
	// AppLabel selects the CoreDNS pods (k8s-app: kube-dns, as upstream).
	AppLabel = "kube-dns"
	// DomainAnnotation on the kube-dns Service is the cluster's domain: a
	// worker's node agent, which gets no cluster settings, reads the
	// Service's address and this (Find).
	DomainAnnotation = "steadyplane.io/cluster-domain"
)

// Ports CoreDNS listens on in its pod.
const (
	HealthPort  = 8080
	ReadyPort   = 8181
	MetricsPort = 9153
)

// Config is what the cluster's DNS is made of.
type Config struct {
	// Domain is the cluster's domain (cluster.local).
	Domain string
	// ServiceIP is the kube-dns Service's cluster IP (ServiceIP of the
	// service range).
	ServiceIP string
	// Image runs "steadyplane dns" (an image of the steadyplane binary);
	// it is on the node already, never pulled.
	Image string
	// Forward sends names outside the cluster to the node's resolvers;
	// without (a node with no resolver), such names fail at once instead.
	Forward bool
	// APIServer is the URL CoreDNS reaches the API server at, from its
	// pod, with its service account's token, failing over between
	// Alternatives (host:port, every API server); "" for client-go's
	// in-cluster configuration (the kubernetes Service).
	APIServer    string
	Alternatives []string
}

// Where the CoreDNS pod finds its files.
const (
	configDir         = "/etc/coredns"
	kubeconfigPath    = configDir + "/kubeconfig"
	kubeconfigContext = "steadyplane"
)

// Kubeconfig is CoreDNS's kubeconfig: its service account's credentials
// and the API servers to fail over between (altsvcclient.PodKubeconfig).
func Kubeconfig(c Config) (string, error) {
	return altsvcclient.PodKubeconfig(c.APIServer, c.Alternatives, Name, kubeconfigPath)
}

// ServiceIP is the kube-dns Service's address: the tenth of the service
// range, as kubeadm's.
func ServiceIP(serviceCIDR string) (net.IP, error) {
	_, n, err := netutils.ParseCIDRSloppy(serviceCIDR)
	if err != nil {
		return nil, fmt.Errorf("service CIDR %q: %w", serviceCIDR, err)
	}
	return netutils.GetIndexedIP(n, 10)
}

// Corefile is CoreDNS's configuration: the cluster's zone and reverse
// zones from the API, everything else forwarded to the node's resolvers
// (with loop detection) or, without Forward, answered by nothing.
func Corefile(c Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, `.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes %s in-addr.arpa ip6.arpa {
%s        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    prometheus :%d
    cache 30
`, c.Domain, kubeconfigLine(c), MetricsPort)
	if c.Forward {
		b.WriteString(`    loop
    forward . /etc/resolv.conf {
        max_concurrent 1000
    }
`)
	}
	b.WriteString("}\n")
	return b.String()
}

// kubeconfigLine is the kubernetes plugin's kubeconfig option, "" for the
// in-cluster configuration.
func kubeconfigLine(c Config) string {
	if c.APIServer == "" {
		return ""
	}
	return "        kubeconfig " + kubeconfigPath + " " + kubeconfigContext + "\n"
}

// HasNameserver says whether a resolver file names a server a pod can
// reach: one that is not on loopback (a stub such as systemd-resolved's
// 127.0.0.53 is the node's own, not the pod's).
func HasNameserver(resolvConf []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(resolvConf))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "nameserver" {
			if ip := netutils.ParseIPSloppy(f[1]); ip != nil && !ip.IsLoopback() {
				return true
			}
		}
	}
	return false
}

// Objects are the DNS's API objects: its service account and least RBAC,
// the Corefile (and kubeconfig), the Deployment and the kube-dns Service.
func Objects(c Config) ([]any, error) {
	labels := map[string]string{"k8s-app": AppLabel, "app.kubernetes.io/managed-by": "steadyplane"}
	selector := map[string]string{"k8s-app": AppLabel}
	sa := rbacutil.ServiceAccount(Namespace, Name)
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: RoleName, Labels: rbacutil.ManagedBy},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	binding := rbacutil.ServiceAccountClusterBinding(RoleName, RoleName, Namespace, Name)
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: Namespace, Labels: labels},
		Data:       map[string]string{"Corefile": Corefile(c)}}
	if c.APIServer != "" {
		kc, err := Kubeconfig(c)
		if err != nil {
			return nil, err
		}
		cm.Data["kubeconfig"] = kc
	}
	sum := sha256.Sum256([]byte(cm.Data["Corefile"] + cm.Data["kubeconfig"]))
	deploy := deployment(c, labels, selector, hex.EncodeToString(sum[:8]))
	svc := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: Namespace,
			Labels:      map[string]string{"k8s-app": AppLabel, "kubernetes.io/name": "CoreDNS", "app.kubernetes.io/managed-by": "steadyplane"},
			Annotations: map[string]string{"prometheus.io/port": fmt.Sprint(MetricsPort), "prometheus.io/scrape": "true", DomainAnnotation: c.Domain}},
		Spec: corev1.ServiceSpec{
			Selector: selector, ClusterIP: c.ServiceIP,
			Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt(53)},
				{Name: "metrics", Port: MetricsPort, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt(MetricsPort)}},
		},
	}
	return []any{sa, role, binding, cm, deploy, svc}, nil
}

// deployment is CoreDNS's Deployment: one pod at a time, rolled when its
// Corefile changes (corefileHash), from the image of the steadyplane binary
// on the node, with the probes and the confinement of kubeadm's add-on.
func deployment(c Config, labels, selector map[string]string, corefileHash string) *appsv1.Deployment {
	probe := func(path string, port int) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt(port), Scheme: corev1.URISchemeHTTP}}}
	}
	liveness := probe("/health", HealthPort)
	liveness.InitialDelaySeconds, liveness.TimeoutSeconds, liveness.FailureThreshold = 60, 5, 5
	readiness := probe("/ready", ReadyPort)
	readiness.PeriodSeconds = 1
	return &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr.To(intstr.FromInt(0)), MaxSurge: ptr.To(intstr.FromInt(1))}},
			Template: corev1.PodTemplateSpec{
				// A new Corefile rolls the pods, which read it at start.
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"steadyplane.io/corefile-sha256": corefileHash}},
				Spec: corev1.PodSpec{
					ServiceAccountName: Name,
					PriorityClassName:  "system-cluster-critical",
					// CoreDNS resolves outside names with the node's
					// resolvers, not with itself.
					DNSPolicy:    corev1.DNSDefault,
					NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
					Tolerations: []corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
						{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: Name}}}}},
					Containers: []corev1.Container{{
						Name: Name, Image: c.Image, ImagePullPolicy: corev1.PullNever,
						Args: []string{"dns", "-conf", configDir + "/Corefile"},
						Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
							{Name: "metrics", ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP}},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("70Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
						},
						VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: configDir, ReadOnly: true}},
						LivenessProbe:  liveness,
						ReadinessProbe: readiness,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities:   &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}},
							SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						},
					}},
				},
			},
		},
	}
}
