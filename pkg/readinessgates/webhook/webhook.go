// Package webhook is a mutating admission webhook that injects readiness
// gates into pods at creation (Pod Ready++ "feature integration"): a user's
// manifest needs no change for a feature that owns a gate.
//
// Policy: only namespaces labelled steadyplane.io/readiness-gates are
// touched (the webhook's namespaceSelector); their pods get the gates the
// namespace's annotation of the same name lists (comma-separated), or
// steadyplane.io/load-balancer-ready when it has none. The webhook is
// registered with failurePolicy Ignore: if it is down, pods are still created.
package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/readinessgates/lbgate"
)

// PolicyKey is both the namespace label that opts a namespace in and the
// namespace annotation that lists its gates.
const PolicyKey = "steadyplane.io/readiness-gates"

// ConfigurationName is the MutatingWebhookConfiguration's name.
const ConfigurationName = "steadyplane-readiness-gates"

// maxReview bounds the body of an AdmissionReview.
const maxReview = 3 << 20

// GatesFor returns the gates a namespace asks for, and a warning for each
// name that is not a valid condition type (a qualified name, like a label key).
func GatesFor(ns *corev1.Namespace) (gates []string, warnings []string) {
	v, ok := ns.Annotations[PolicyKey]
	if !ok || strings.TrimSpace(v) == "" {
		return []string{string(lbgate.ConditionType)}, nil
	}
	for _, g := range strings.Split(v, ",") {
		g = strings.TrimSpace(g)
		if g == "" {
			continue
		}
		if errs := validation.IsQualifiedName(g); len(errs) > 0 {
			warnings = append(warnings, fmt.Sprintf("readiness gate %q from namespace annotation %s ignored: %s", g, PolicyKey, strings.Join(errs, "; ")))
			continue
		}
		gates = append(gates, g)
	}
	return gates, warnings
}

// jsonPatchOp is one RFC 6902 operation.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Patch returns the JSON patch that adds to pod the gates it lacks, or nil.
func Patch(pod *corev1.Pod, gates []string) ([]byte, error) {
	var missing []corev1.PodReadinessGate
	for _, g := range gates {
		found := false
		for _, have := range pod.Spec.ReadinessGates {
			if string(have.ConditionType) == g {
				found = true
			}
		}
		for _, m := range missing {
			if string(m.ConditionType) == g {
				found = true
			}
		}
		if !found {
			missing = append(missing, corev1.PodReadinessGate{ConditionType: corev1.PodConditionType(g)})
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	var ops []jsonPatchOp
	if len(pod.Spec.ReadinessGates) == 0 {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/spec/readinessGates", Value: missing})
	} else {
		for _, m := range missing {
			ops = append(ops, jsonPatchOp{Op: "add", Path: "/spec/readinessGates/-", Value: m})
		}
	}
	return json.Marshal(ops)
}

// Handler serves AdmissionReviews of pod creations.
type Handler struct {
	// Namespace returns a namespace by name.
	Namespace func(ctx context.Context, name string) (*corev1.Namespace, error)
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReview+1))
	if err != nil || len(body) > maxReview {
		http.Error(w, "AdmissionReview missing or too large", http.StatusRequestEntityTooLarge)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	resp := h.review(r.Context(), review.Request)
	resp.UID = review.Request.UID
	out, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func (h *Handler) review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	allow := &admissionv1.AdmissionResponse{Allowed: true}
	if req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create {
		return allow
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		allow.Warnings = []string{"steadyplane readiness gates: pod could not be read: " + err.Error()}
		return allow
	}
	ns, err := h.Namespace(ctx, req.Namespace)
	if err != nil {
		allow.Warnings = []string{fmt.Sprintf("steadyplane readiness gates: namespace %s: %v", req.Namespace, err)}
		return allow
	}
	gates, warnings := GatesFor(ns)
	allow.Warnings = warnings
	patch, err := Patch(&pod, gates)
	if err != nil || patch == nil {
		return allow
	}
	pt := admissionv1.PatchTypeJSONPatch
	allow.Patch, allow.PatchType = patch, &pt
	klog.V(2).InfoS("Injected readiness gates", "namespace", req.Namespace, "pod", pod.Name+pod.GenerateName, "gates", gates)
	return allow
}

// Configuration returns the MutatingWebhookConfiguration that sends pod
// creations in labelled namespaces to url, trusting caBundle.
func Configuration(url string, caBundle []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	ignore := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	ifNeeded := admissionregistrationv1.IfNeededReinvocationPolicy
	timeout := int32(5)
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "readiness-gates.steadyplane.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: PolicyKey, Operator: metav1.LabelSelectorOpExists}}},
			FailurePolicy:           &ignore,
			SideEffects:             &none,
			ReinvocationPolicy:      &ifNeeded,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// Register creates or updates the webhook's configuration. Every server's
// controller registers the same one at its start: a conflict with another
// (an update in between, or a create at the same time) is read again and
// retried.
func Register(ctx context.Context, client kubernetes.Interface, url string, caBundle []byte) error {
	want := Configuration(url, caBundle)
	api := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	err := retry.OnError(retry.DefaultRetry, func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }, func() error {
		existing, err := api.Get(ctx, ConfigurationName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = api.Create(ctx, want, metav1.CreateOptions{})
		case err == nil:
			existing.Webhooks = want.Webhooks
			_, err = api.Update(ctx, existing, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("registering MutatingWebhookConfiguration %s: %w", ConfigurationName, err)
	}
	return nil
}

// URL is where an API server calls the webhook that serves on addr.
func URL(addr string) string { return "https://" + addr + "/mutate" }

// Healthy asks the webhook serving on addr for /healthz, trusting only the
// CA in caPEM: nil when this webhook, not some other program on its port,
// answers.
func Healthy(ctx context.Context, addr string, caPEM []byte) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return errors.New("the webhook's CA file holds no PEM certificate")
	}
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
	defer transport.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second, Transport: transport}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("webhook /healthz on %s: %s", addr, resp.Status)
	}
	return nil
}

// Serve serves h over TLS on addr until ctx ends.
func Serve(ctx context.Context, addr string, getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error), h http.Handler) error {
	mux := http.NewServeMux()
	mux.Handle("/mutate", h)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	srv := &http.Server{
		// An admission review is small and the API server waits at most
		// its own timeout (10s by default): a slow or stuck client cannot
		// hold a connection longer.
		Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second,
		TLSConfig: &tls.Config{GetCertificate: getCertificate, MinVersion: tls.VersionTLS12},
	}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServeTLS("", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
