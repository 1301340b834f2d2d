package monitor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/node/localstatus"
)

// probeTimeout bounds one look at an endpoint: a server that hangs counts
// as one that does not answer.
const probeTimeout = 3 * time.Second

// AgentEndpoint reads the node agent's local status from its read-only
// loopback endpoint, e.g. http://127.0.0.1:10255.
type AgentEndpoint struct {
	URL    string
	Client *http.Client
}

// Pods implements AgentStatus.
func (a AgentEndpoint) Pods(ctx context.Context) ([]localstatus.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+"/localstatus/pods", nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	var pods []localstatus.Pod
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&pods); err != nil {
		return nil, fmt.Errorf("%s: %w", req.URL, err)
	}
	return pods, nil
}

// APIServer looks at the operand API server through a rest.Config (TLS
// verified against the cluster CA, the monitor's own identity).
type APIServer struct {
	Config *rest.Config
	http   *http.Client
	client kubernetes.Interface
}

// NewAPIServer returns the Server the config reaches.
func NewAPIServer(cfg *rest.Config) (*APIServer, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = probeTimeout
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	return &APIServer{Config: cfg, http: hc, client: cs}, nil
}

// Probe implements Server.
func (s *APIServer) Probe(ctx context.Context, path string) *Probe {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Config.Host+path, nil)
	if err != nil {
		return nil
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return &Probe{OK: resp.StatusCode == http.StatusOK, Body: string(body)}
}

// MirrorPod implements Server.
func (s *APIServer) MirrorPod(ctx context.Context, namespace, name string) *MirrorPod {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	pod, err := s.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	m := &MirrorPod{Revision: pod.Annotations[fallback.RevisionAnnotation]}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			m.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return m
}
