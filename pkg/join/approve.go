package join

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	certhelpers "k8s.io/kubernetes/pkg/apis/certificates"
)

// Verdict is what the serving-certificate approver does with a request.
type Verdict string

const (
	// Approve lets the controller manager sign it.
	Approve Verdict = "Approve"
	// Deny refuses it for good: it can never be right.
	Deny Verdict = "Deny"
	// Wait leaves it pending: the Node does not show the address yet.
	Wait Verdict = "Wait"
)

// servingUsages are the key usages a node's serving certificate may have.
var servingUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth}

// DecideServing judges a node's request for its serving certificate
// (signer kubernetes.io/kubelet-serving), which the controller manager
// does not approve on its own: the node itself asks, for its own name,
// and only for addresses its Node shows (node is nil when it has none).
func DecideServing(c *certificatesv1.CertificateSigningRequest, node *corev1.Node) (Verdict, string) {
	req, err := certhelpers.ParseCSR(c.Spec.Request)
	if err != nil {
		return Deny, "the request does not parse: " + err.Error()
	}
	name, ok := strings.CutPrefix(c.Spec.Username, "system:node:")
	if !ok || !slices.Contains(c.Spec.Groups, "system:nodes") {
		return Deny, fmt.Sprintf("asked by %s, not by a node", c.Spec.Username)
	}
	if req.Subject.CommonName != c.Spec.Username || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		return Deny, fmt.Sprintf("node %s asked for a certificate of %q in %v", name, req.Subject.CommonName, req.Subject.Organization)
	}
	if !slices.Contains(c.Spec.Usages, certificatesv1.UsageServerAuth) {
		return Deny, "no server auth usage"
	}
	for _, u := range c.Spec.Usages {
		if !slices.Contains(servingUsages, u) {
			return Deny, fmt.Sprintf("usage %q is not a serving certificate's", u)
		}
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return Deny, "e-mail or URI names are not a node's"
	}
	for _, d := range req.DNSNames {
		if d != name {
			return Deny, fmt.Sprintf("node %s asked for the name %q", name, d)
		}
	}
	if len(req.IPAddresses) == 0 && len(req.DNSNames) == 0 {
		return Deny, "no name and no address"
	}
	if node == nil {
		return Wait, fmt.Sprintf("Node %s is not registered yet", name)
	}
	for _, ip := range req.IPAddresses {
		if !nodeHasAddress(node, ip) {
			return Wait, fmt.Sprintf("Node %s does not show the address %s", name, ip)
		}
	}
	return Approve, fmt.Sprintf("node %s's serving certificate for its own name and addresses", name)
}

// clientUsages are the key usages a node's client certificate may have.
var clientUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth}

// DecideNodeClient judges a request for a node's client certificate
// (signer kubernetes.io/kube-apiserver-client-kubelet): the servers, not
// the controller manager, decide which node a requester may become. A
// node may renew its own; a join token may become a node no Node names
// yet (nodeExists is whether one does, other than the one the servers
// reserved for this request), never an existing one, whose pods'
// secrets it could then read. Other requesters are left to an
// administrator (kubectl certificate approve).
func DecideNodeClient(c *certificatesv1.CertificateSigningRequest, nodeExists bool) (Verdict, string) {
	req, err := certhelpers.ParseCSR(c.Spec.Request)
	if err != nil {
		return Deny, "the request does not parse: " + err.Error()
	}
	name, ok := strings.CutPrefix(req.Subject.CommonName, "system:node:")
	if !ok || name == "" || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		return Deny, fmt.Sprintf("a certificate of %q in %v is no node's", req.Subject.CommonName, req.Subject.Organization)
	}
	if !slices.Contains(c.Spec.Usages, certificatesv1.UsageClientAuth) {
		return Deny, "no client auth usage"
	}
	for _, u := range c.Spec.Usages {
		if !slices.Contains(clientUsages, u) {
			return Deny, fmt.Sprintf("usage %q is not a node client certificate's", u)
		}
	}
	if len(req.DNSNames)+len(req.IPAddresses)+len(req.EmailAddresses)+len(req.URIs) > 0 {
		return Deny, "a node's client certificate names no host, address, e-mail or URI"
	}
	switch {
	case c.Spec.Username == req.Subject.CommonName && slices.Contains(c.Spec.Groups, "system:nodes") && !nodeExists:
		return Deny, fmt.Sprintf("node %s asks to renew its client certificate, but the cluster has no Node %s (taken out with remove-node?)", name, name)
	case c.Spec.Username == req.Subject.CommonName && slices.Contains(c.Spec.Groups, "system:nodes"):
		return Approve, fmt.Sprintf("node %s renews its own client certificate", name)
	case slices.Contains(c.Spec.Groups, JoinGroup) && nodeExists:
		return Deny, fmt.Sprintf("%s holds a join token, and Node %s exists: a token joins a new node, it never becomes one the cluster has (take that node out first: steadyplane remove-node %s)", c.Spec.Username, name, name)
	case slices.Contains(c.Spec.Groups, JoinGroup):
		return Approve, fmt.Sprintf("%s joins the cluster as the new node %s", c.Spec.Username, name)
	}
	return Wait, fmt.Sprintf("%s is neither node %s nor a join token's holder: left to an administrator", c.Spec.Username, name)
}

// certificateRequests counts the node certificate requests the servers
// decided, by signer and verdict.
var certificateRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steadyplane_join_certificate_requests_total",
	Help: "Node certificate signing requests the servers approved or denied, by signer and verdict."}, []string{"signer", "verdict"})

// Collectors are the join metrics, served by a server's node agent.
func Collectors() []prometheus.Collector { return []prometheus.Collector{certificateRequests} }

// RunCertificateApprover approves (or denies) the nodes' requests for
// client certificates (DecideNodeClient) and serving certificates
// (DecideServing) until ctx ends, looking again every 10s at those that
// wait. Each decision is a condition on the request, an Event, a log line
// and a metric. Several servers may run it: a decision another one wrote
// first is left as it is.
func RunCertificateApprover(ctx context.Context, client kubernetes.Interface, logf func(string, ...any)) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "steadyplane-certificate-approver"})
	factory := informers.NewSharedInformerFactory(client, 10*time.Second)
	informer := factory.Certificates().V1().CertificateSigningRequests().Informer()
	handle := func(obj any) {
		c, ok := obj.(*certificatesv1.CertificateSigningRequest)
		if !ok || decided(c) {
			return
		}
		var verdict Verdict
		var why string
		switch c.Spec.SignerName {
		case certificatesv1.KubeletServingSignerName:
			name := strings.TrimPrefix(c.Spec.Username, "system:node:")
			node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				node, err = nil, nil
			}
			if err != nil {
				return // the next resync looks again
			}
			verdict, why = DecideServing(c, node)
		case certificatesv1.KubeAPIServerClientKubeletSignerName:
			exists, err := nodeHeld(ctx, client, c)
			if err != nil {
				return
			}
			verdict, why = DecideNodeClient(c, exists)
			if verdict == Approve && slices.Contains(c.Spec.Groups, JoinGroup) {
				// The name is this request's once its Node exists: a
				// second request for it, here or on another server, finds
				// it held.
				held, err := reserveNode(ctx, client, c)
				if err != nil {
					return
				}
				if held {
					verdict, why = DecideNodeClient(c, true)
				}
			}
		default:
			return
		}
		if verdict == Wait {
			return
		}
		c = c.DeepCopy()
		cond := certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
			Reason: "SteadyplaneNodeCertificate", Message: why, LastUpdateTime: metav1.Now()}
		eventType, reason := corev1.EventTypeNormal, "NodeCertificateApproved"
		if verdict == Deny {
			cond.Type, cond.Reason = certificatesv1.CertificateDenied, "NotThisNodesCertificate"
			eventType, reason = corev1.EventTypeWarning, "NodeCertificateDenied"
		}
		c.Status.Conditions = append(c.Status.Conditions, cond)
		if _, err := client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, c.Name, c, metav1.UpdateOptions{}); err == nil {
			certificateRequests.WithLabelValues(c.Spec.SignerName, string(verdict)).Inc()
			recorder.Event(c, eventType, reason, why)
			logf("%s CertificateSigningRequest %s (%s) of %s: %s", map[Verdict]string{Approve: "approved", Deny: "denied"}[verdict], c.Name, c.Spec.SignerName, c.Spec.Username, why)
		}
	}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, obj any) { handle(obj) }})
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
}

// ReservedForAnnotation on a Node the servers made for a join token's
// certificate request names that request: the Node holds the name for it.
const ReservedForAnnotation = "join.steadyplane.io/reserved-for"

// requestedNode is the node name a client certificate request asks for
// ("" when it names none: it is denied).
func requestedNode(c *certificatesv1.CertificateSigningRequest) string {
	req, err := certhelpers.ParseCSR(c.Spec.Request)
	if err != nil {
		return ""
	}
	name, _ := strings.CutPrefix(req.Subject.CommonName, "system:node:")
	return name
}

// nodeHeld says whether a Node holds the name c asks for, other than one
// the servers reserved for c itself.
func nodeHeld(ctx context.Context, client kubernetes.Interface, c *certificatesv1.CertificateSigningRequest) (bool, error) {
	name := requestedNode(c)
	if name == "" {
		return false, nil
	}
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return node.Annotations[ReservedForAnnotation] != c.Name, nil
}

// reserveNode makes the Node c asks for, as the joining node will
// register it (RegisterNode finds it and adds its address), reserved for
// c; it says whether the name turned out held by another: a create is
// atomic, so two requests for one name never both get it.
func reserveNode(ctx context.Context, client kubernetes.Interface, c *certificatesv1.CertificateSigningRequest) (bool, error) {
	name := requestedNode(c)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: nodeLabels(name), Annotations: map[string]string{ReservedForAnnotation: c.Name}}}
	_, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nodeHeld(ctx, client, c)
	}
	return false, err
}

func decided(c *certificatesv1.CertificateSigningRequest) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == certificatesv1.CertificateApproved || cond.Type == certificatesv1.CertificateDenied || cond.Type == certificatesv1.CertificateFailed {
			return true
		}
	}
	return len(c.Status.Certificate) > 0
}
