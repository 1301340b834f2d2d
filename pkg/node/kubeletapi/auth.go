package kubeletapi

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Attributes is what a request to the node's API asks for, as the kubelet
// names it for authorization: a verb on a subresource of the Node (log,
// metrics, stats, pods, healthz, releases and volumes (steadyplane's), or proxy for exec, attach, port-forward and
// the rest), so that RBAC rules written for the kubelet apply unchanged.
func Attributes(u user.Info, method, path, nodeName string) authorizer.Attributes {
	verb := map[string]string{http.MethodPost: "create", http.MethodGet: "get", http.MethodHead: "get",
		http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete"}[method]
	subresource := "proxy"
	for _, p := range []struct{ prefix, subresource string }{
		{"/stats", "stats"}, {"/metrics", "metrics"}, {"/logs", "log"}, {"/healthz", "healthz"}, {"/pods", "pods"}, {"/releases", "releases"}, {"/volumes", "volumes"},
	} {
		if path == p.prefix || strings.HasPrefix(path, p.prefix+"/") {
			subresource = p.subresource
		}
	}
	return authorizer.AttributesRecord{User: u, Verb: verb, APIVersion: "v1", Resource: "nodes", Subresource: subresource,
		Name: nodeName, ResourceRequest: true, Path: path}
}

// delegatedAuth authenticates a request by client certificate (from the
// cluster CA) or bearer token (TokenReview), and authorizes it by
// SubjectAccessReview, as the kubelet does with webhook authn/authz.
type delegatedAuth struct {
	authn    authenticator.Request
	authz    authorizer.Authorizer
	nodeName string
}

func newDelegatedAuth(client kubernetes.Interface, clientCAFile, nodeName string) (*delegatedAuth, error) {
	ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("reading the client CA %s: %w", clientCAFile, err)
	}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		CacheTTL:                           2 * time.Minute,
		ClientCertificateCAContentProvider: ca,
		TokenAccessReviewClient:            client.AuthenticationV1(),
		WebhookRetryBackoff:                genericoptions.DefaultAuthWebhookRetryBackoff(),
	}.New()
	if err != nil {
		return nil, err
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       genericoptions.DefaultAuthWebhookRetryBackoff(),
	}.New()
	if err != nil {
		return nil, err
	}
	return &delegatedAuth{authn: authn, authz: authz, nodeName: nodeName}, nil
}

// filter lets through only requests that are authenticated and allowed.
func (d *delegatedAuth) filter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, ok, err := d.authn.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				klog.V(2).InfoS("Kubelet API: authentication failed", "err", err, "remote", r.RemoteAddr)
			}
			requests.WithLabelValues("unauthorized").Inc()
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := Attributes(resp.User, r.Method, r.URL.Path, d.nodeName)
		decision, reason, err := d.authz.Authorize(r.Context(), attrs)
		if err != nil {
			klog.ErrorS(err, "Kubelet API: authorization failed", "user", resp.User.GetName())
			requests.WithLabelValues("error").Inc()
			http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=nodes, subresource=%s)", resp.User.GetName(), attrs.GetVerb(), attrs.GetSubresource()), http.StatusInternalServerError)
			return
		}
		if decision != authorizer.DecisionAllow {
			klog.V(2).InfoS("Kubelet API: forbidden", "user", resp.User.GetName(), "verb", attrs.GetVerb(), "subresource", attrs.GetSubresource(), "reason", reason)
			requests.WithLabelValues("forbidden").Inc()
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource=%s)", resp.User.GetName(), attrs.GetVerb(), attrs.GetSubresource()), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r.WithContext(r.Context()))
	})
}
