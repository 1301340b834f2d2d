package join

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	certutil "k8s.io/client-go/util/cert"

	"github.com/steadyplane/steadyplane/pkg/pki"
)

// NewEtcdClient is a quiet etcd client of endpoints with a client
// certificate and the etcd CA (PEM).
func NewEtcdClient(endpoints []string, certPEM, keyPEM, caPEM []byte) (*clientv3.Client, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	roots, err := certutil.NewPoolFromBytes(caPEM)
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}})
}

// EtcdEndpoints are the etcd client URLs of servers (host:port of their API
// servers) on port, but self's (a host address; "" for none).
func EtcdEndpoints(servers []string, port int, self string) []string {
	if port == 0 {
		port = DefaultEtcdClientPort
	}
	var out []string
	for _, s := range servers {
		host, _, err := net.SplitHostPort(s)
		if err != nil || host == self {
			continue
		}
		out = append(out, "https://"+net.JoinHostPort(host, strconv.Itoa(port)))
	}
	return out
}

// dataDirEtcdClient reaches the etcd members of the servers dataDir knows,
// with its API server's etcd client certificate.
func dataDirEtcdClient(dataDir string, st State) (*clientv3.Client, error) {
	dir := filepath.Join(dataDir, "pki")
	var files [3][]byte
	for i, name := range []string{pki.APIServerEtcdClientName + ".crt", pki.APIServerEtcdClientName + ".key", pki.EtcdCAName + ".crt"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("%s is not a server's data directory: %w", dataDir, err)
		}
		files[i] = b
	}
	endpoints := EtcdEndpoints(st.Servers, st.EtcdClientPort, "")
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("%s knows no server of its cluster (%s)", dataDir, StateFile)
	}
	return NewEtcdClient(endpoints, files[0], files[1], files[2])
}

func errNoMember(servers []string) error {
	return fmt.Errorf("etcd: no member of the cluster is known to reach (servers %v)", servers)
}
