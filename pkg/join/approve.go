package join

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
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

// RunServingApprover approves (or denies) the nodes' requests for serving
// certificates until ctx ends, looking again every 10s at those that
// wait. Several servers may run it: an approval another one wrote first
// is left as it is.
func RunServingApprover(ctx context.Context, client kubernetes.Interface, logf func(string, ...any)) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Second, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", certificatesv1.KubeletServingSignerName).String()
	}))
	informer := factory.Certificates().V1().CertificateSigningRequests().Informer()
	handle := func(obj any) {
		c, ok := obj.(*certificatesv1.CertificateSigningRequest)
		if !ok || decided(c) {
			return
		}
		name := strings.TrimPrefix(c.Spec.Username, "system:node:")
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			node, err = nil, nil
		}
		if err != nil {
			return // the next resync looks again
		}
		verdict, why := DecideServing(c, node)
		if verdict == Wait {
			return
		}
		c = c.DeepCopy()
		cond := certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
			Reason: "SteadyplaneNodeServing", Message: why, LastUpdateTime: metav1.Now()}
		if verdict == Deny {
			cond.Type, cond.Reason = certificatesv1.CertificateDenied, "NotANodeServingCertificate"
		}
		c.Status.Conditions = append(c.Status.Conditions, cond)
		if _, err := client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, c.Name, c, metav1.UpdateOptions{}); err == nil {
			logf("%s: %sd CertificateSigningRequest %s: %s", name, strings.ToLower(string(verdict)), c.Name, why)
		}
	}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, obj any) { handle(obj) }})
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
}

func decided(c *certificatesv1.CertificateSigningRequest) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == certificatesv1.CertificateApproved || cond.Type == certificatesv1.CertificateDenied || cond.Type == certificatesv1.CertificateFailed {
			return true
		}
	}
	return len(c.Status.Certificate) > 0
}
