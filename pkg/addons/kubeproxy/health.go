package kubeproxy

import (
	"context"
	"net"
	"net/http"
	"strconv"
)

// HealthzURL is kube-proxy's health check on a node of address nodeIP.
func HealthzURL(nodeIP string, port int) string {
	return "http://" + net.JoinHostPort(nodeIP, strconv.Itoa(port)) + "/healthz"
}

// Healthy asks url (HealthzURL) once: kube-proxy answers 200 once it has
// programmed the node's rules from the API. The string says why not.
func Healthy(ctx context.Context, client *http.Client, url string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, "healthz " + resp.Status
	}
	return true, ""
}
