// Package kubeletapi is the node agent's authenticated API on port 10250,
// the endpoints of the kubelet the API server proxies to: container logs,
// exec, attach and port-forward (so kubectl logs, exec, attach and
// port-forward work), with pods, metrics and healthz. Requests are
// authenticated by client certificate or token and authorized by
// SubjectAccessReview against the Node's subresources, as the kubelet's.
// Streams use upstream's CRI streaming code (SPDY and websocket).
package kubeletapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/kubernetes/pkg/kubelet/metrics/collectors"
	serverstats "k8s.io/kubernetes/pkg/kubelet/server/stats"

	"github.com/steadyplane/steadyplane/pkg/binary"
	"github.com/steadyplane/steadyplane/pkg/node/localstatus"
	"github.com/steadyplane/steadyplane/pkg/pki"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// ErrNotFound is wrapped by a Host's errors for a pod or container it does
// not run; the API answers 404.
var ErrNotFound = errors.New("not found")

// ErrBadRequest marks a request the node refuses as malformed (400).
var ErrBadRequest = errors.New("bad request")

// LocalVolumesPath is where a node's API serves its local volumes: POST
// and DELETE LocalVolumesPath+<pv>.
const LocalVolumesPath = "/volumes/local/"

// LocalVolume is what a node says about a local volume's directory it made.
type LocalVolume struct {
	// Path is the directory on the node.
	Path string `json:"path"`
	// CapacityBytes and AvailableBytes are its filesystem's size and free
	// space, for the caller to check a claim's request against.
	CapacityBytes  int64 `json:"capacityBytes"`
	AvailableBytes int64 `json:"availableBytes"`
}

// LocalVolumes makes and removes the directories of local volumes, by
// their PersistentVolume's name (errors wrapping ErrBadRequest for a name
// that is none).
type LocalVolumes interface {
	Create(name string) (LocalVolume, error)
	Remove(name string) error
}

// NodeAddress is where n's node API answers (its InternalIP and the port
// of its daemon endpoint), "" when it does not say.
func NodeAddress(n *corev1.Node) string {
	port := n.Status.DaemonEndpoints.KubeletEndpoint.Port
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && port > 0 {
			return net.JoinHostPort(a.Address, strconv.Itoa(int(port)))
		}
	}
	return ""
}

// Host is what the API needs from the node agent.
type Host interface {
	// Container returns a container of a pod the node runs; uid "" matches
	// any pod of that name.
	Container(namespace, pod, uid, container string) (*Container, error)
	// PodNetNS returns the path of the pod's network namespace, "" for the
	// host's network.
	PodNetNS(namespace, pod, uid string) (string, error)
	// Pods returns the pods the node runs, with their status.
	Pods() *corev1.PodList
}

// Container is one container as the API reaches it.
type Container struct {
	// Status is the container's status as the agent last computed it.
	Status corev1.ContainerStatus
	// LogPath returns the CRI log file of run number n (0 first).
	LogPath func(run int32) string
	// Run is the current run, nil when none runs.
	Run runtime.Container
	// Env and Dir are what commands run inside it get.
	Env []string
	Dir string
}

// Options configure the API.
type Options struct {
	// Address is host:port to listen on (the node's IP, port 10250).
	Address string
	// CertFile and KeyFile are the serving certificate and key, signed by
	// the cluster CA for the node's IP and name.
	CertFile, KeyFile string
	// ClientCAFile verifies client certificates (the API server's
	// kubelet client certificate among them).
	ClientCAFile string
	// NodeName is the Node the authorization attributes name.
	NodeName string
	// Client sends TokenReviews and SubjectAccessReviews.
	Client kubernetes.Interface
	// Metrics serves /metrics; nil for none.
	Metrics http.Handler
	// ReleaseDir holds the steadyplane binaries the node has installed,
	// served to other nodes by digest (GET /releases/sha256:<hex>), and
	// takes one handed in (PUT, as steadyplane upgrade --kubeconfig does
	// through the API server's node proxy); "" for none.
	ReleaseDir string
	// LocalVolumes makes and removes the directories of the local-path
	// provisioner's volumes (POST and DELETE LocalVolumesPath+<pv>,
	// authorized as create and delete on nodes/volumes); nil for none.
	LocalVolumes LocalVolumes
	// Stats serves /stats/summary and /metrics/resource (authorized as
	// nodes/stats and nodes/metrics), as the kubelet's; nil for none.
	Stats serverstats.SummaryProvider
	// StreamIdleTimeout closes an exec, attach or port-forward stream
	// idle that long (the kubelet's default: 4h).
	StreamIdleTimeout time.Duration
}

var requests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "steadyplane_node_api_requests_total",
	Help: "Requests to the node agent's authenticated API, by outcome: served, unauthorized, forbidden, error.",
}, []string{"outcome"})

// Collectors returns the API's metrics, for the agent's registry.
func Collectors() []prometheus.Collector { return []prometheus.Collector{requests} }

// Server is the API, ready to serve.
type Server struct {
	opts     Options
	host     Host
	handler  http.Handler
	listener net.Listener
	tls      *tls.Config
}

// New checks the options, loads the certificates and listens; Serve
// serves. An error says which file or address is wrong.
func New(o Options, host Host) (*Server, error) {
	if o.StreamIdleTimeout <= 0 {
		o.StreamIdleTimeout = 4 * time.Hour
	}
	// Renewed while the node runs (by up on a server, by the node's
	// certificate requests on a worker): read again when it changes.
	pair, err := pki.LoadServingPair(o.CertFile, o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file, --tls-private-key-file: %w", err)
	}
	auth, err := newDelegatedAuth(o.Client, o.ClientCAFile, o.NodeName)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: o, host: host}
	s.tls = &tls.Config{GetCertificate: pair.GetCertificate, MinVersion: tls.VersionTLS12,
		// Verified by the authenticator against the client CA, so that a
		// bearer token is an alternative to a certificate.
		ClientAuth: tls.RequestClientCert}
	s.handler = auth.filter(s.routes())
	s.listener, err = net.Listen("tcp", o.Address)
	if err != nil {
		return nil, fmt.Errorf("listening on %s for the node API: %w", o.Address, err)
	}
	return s, nil
}

// Addr is the address the API listens on.
func (s *Server) Addr() net.Addr { return s.listener.Addr() }

// Serve serves until ctx ends.
func (s *Server) Serve(ctx context.Context) {
	srv := &http.Server{Handler: s.handler, TLSConfig: s.tls, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second,
		ErrorLog: nil, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	klog.InfoS("Node API serving", "address", s.listener.Addr().String())
	if err := srv.ServeTLS(s.listener, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		klog.ErrorS(err, "Serving the node API", "address", s.opts.Address)
	}
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { served(); fmt.Fprint(w, "ok") })
	if s.opts.Metrics != nil {
		mux.Handle("GET /metrics", s.opts.Metrics)
	}
	mux.HandleFunc("GET /pods", func(w http.ResponseWriter, _ *http.Request) { served(); localstatus.WriteJSON(w, s.host.Pods()) })
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.containerLogs)
	if s.opts.ReleaseDir != "" {
		mux.HandleFunc("GET /releases/{digest}", s.release)
		mux.HandleFunc("PUT /releases/{digest}", s.receiveRelease)
	}
	if s.opts.Stats != nil {
		mux.HandleFunc("GET /stats/summary", s.statsSummary)
		// Upstream's own collector, so the series and labels are those
		// metrics-server reads from a kubelet.
		resource := compbasemetrics.NewKubeRegistry()
		resource.CustomMustRegister(collectors.NewResourceMetricsCollector(s.opts.Stats))
		metrics := compbasemetrics.HandlerFor(resource, compbasemetrics.HandlerOpts{ErrorHandling: compbasemetrics.ContinueOnError})
		mux.Handle("GET /metrics/resource", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served(); metrics.ServeHTTP(w, r) }))
	}
	if s.opts.LocalVolumes != nil {
		mux.HandleFunc("POST "+LocalVolumesPath+"{pv}", s.createLocalVolume)
		mux.HandleFunc("DELETE "+LocalVolumesPath+"{pv}", s.removeLocalVolume)
	}
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		mux.HandleFunc(method+" /exec/{namespace}/{pod}/{container}", s.exec)
		mux.HandleFunc(method+" /exec/{namespace}/{pod}/{uid}/{container}", s.exec)
		mux.HandleFunc(method+" /attach/{namespace}/{pod}/{container}", s.attach)
		mux.HandleFunc(method+" /attach/{namespace}/{pod}/{uid}/{container}", s.attach)
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}", s.portForward)
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}/{uid}", s.portForward)
	}
	return mux
}

func served() { requests.WithLabelValues("served").Inc() }

// fail answers err: 404 for a pod or container the node does not run, 400
// for a request that cannot be served as asked.
func fail(w http.ResponseWriter, err error, code int) {
	if errors.Is(err, ErrNotFound) {
		code = http.StatusNotFound
	}
	requests.WithLabelValues("error").Inc()
	http.Error(w, err.Error(), code)
}

// release serves the binary of a release by its digest, checked against
// its content, to another node moving to it.
func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	path, err := binary.Find(s.opts.ReleaseDir, r.PathValue("digest"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fail(w, fmt.Errorf("release %s: %w on this node", r.PathValue("digest"), ErrNotFound), http.StatusNotFound)
		return
	case err != nil:
		fail(w, err, http.StatusBadRequest)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		fail(w, err, http.StatusInternalServerError)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		fail(w, err, http.StatusInternalServerError)
		return
	}
	served()
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", st.ModTime(), f)
}

// receiveRelease installs the binary in the request's body, if its content
// is the digest the path names (authorized as update on nodes/releases):
// the release's first copy in the cluster, which the other nodes fetch
// from here.
func (s *Server) receiveRelease(w http.ResponseWriter, r *http.Request) {
	digest := r.PathValue("digest")
	if _, err := binary.ParseDigest(digest); err != nil {
		fail(w, err, http.StatusBadRequest)
		return
	}
	if path, err := binary.Find(s.opts.ReleaseDir, digest); err == nil {
		served()
		fmt.Fprintf(w, "%s is here already (%s)\n", digest, filepath.Base(path))
		return
	}
	path, err := binary.Receive(r.Body, s.opts.ReleaseDir, digest)
	if errors.Is(err, binary.ErrRefused) {
		fail(w, err, http.StatusBadRequest)
		return
	}
	if err != nil {
		fail(w, err, http.StatusInternalServerError)
		return
	}
	klog.InfoS("Received a release", "digest", digest, "path", path)
	served()
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "%s installed (%s)\n", digest, filepath.Base(path))
}

// createLocalVolume makes the directory of a local volume, named by its
// PersistentVolume, and says where it is and how much room its
// filesystem has.
func (s *Server) createLocalVolume(w http.ResponseWriter, r *http.Request) {
	v, err := s.opts.LocalVolumes.Create(r.PathValue("pv"))
	if errors.Is(err, ErrBadRequest) {
		fail(w, err, http.StatusBadRequest)
		return
	}
	if err != nil {
		fail(w, err, http.StatusInternalServerError)
		return
	}
	klog.InfoS("Local volume made", "pv", r.PathValue("pv"), "path", v.Path)
	served()
	localstatus.WriteJSON(w, v)
}

// removeLocalVolume deletes the directory of a local volume and its data.
func (s *Server) removeLocalVolume(w http.ResponseWriter, r *http.Request) {
	err := s.opts.LocalVolumes.Remove(r.PathValue("pv"))
	if errors.Is(err, ErrBadRequest) {
		fail(w, err, http.StatusBadRequest)
		return
	}
	if err != nil {
		fail(w, err, http.StatusInternalServerError)
		return
	}
	klog.InfoS("Local volume removed", "pv", r.PathValue("pv"))
	served()
	localstatus.WriteJSON(w, struct{}{})
}

// statsSummary answers the summary API: the node's and its pods' CPU and
// memory (only_cpu_and_memory=true asks for nothing else, which is all
// there is).
func (s *Server) statsSummary(w http.ResponseWriter, r *http.Request) {
	summary, err := s.opts.Stats.Get(r.Context(), true)
	if err != nil {
		fail(w, err, http.StatusInternalServerError)
		return
	}
	served()
	localstatus.WriteJSON(w, summary)
}
