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
	cfg, err := EtcdClientConfig(certPEM, keyPEM, caPEM)
	if err != nil {
		return nil, err
	}
	cfg.Endpoints = endpoints
	return clientv3.New(cfg)
}

// EtcdClientConfig is a quiet etcd client's configuration, with no
// endpoint yet, for a client certificate and the etcd CA (PEM).
func EtcdClientConfig(certPEM, keyPEM, caPEM []byte) (clientv3.Config, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return clientv3.Config{}, err
	}
	roots, err := certutil.NewPoolFromBytes(caPEM)
	if err != nil {
		return clientv3.Config{}, err
	}
	return clientv3.Config{DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}, nil
}

// DataDirEtcdCredentials are the etcd client certificate, key and CA
// (PEM) of a server's data directory: its API server's.
func DataDirEtcdCredentials(dataDir string) (certPEM, keyPEM, caPEM []byte, err error) {
	dir := filepath.Join(dataDir, "pki")
	var files [3][]byte
	for i, name := range []string{pki.APIServerEtcdClientName + ".crt", pki.APIServerEtcdClientName + ".key", pki.EtcdCAName + ".crt"} {
		if files[i], err = os.ReadFile(filepath.Join(dir, name)); err != nil {
			return nil, nil, nil, fmt.Errorf("%s is not a server's data directory: %w", dataDir, err)
		}
	}
	return files[0], files[1], files[2], nil
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
	certPEM, keyPEM, caPEM, err := DataDirEtcdCredentials(dataDir)
	if err != nil {
		return nil, err
	}
	endpoints := EtcdEndpoints(st.Servers, st.EtcdClientPort, "")
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("%s knows no server of its cluster (%s)", dataDir, StateFile)
	}
	return NewEtcdClient(endpoints, certPEM, keyPEM, caPEM)
}

func errNoMember(servers []string) error {
	return fmt.Errorf("etcd: no member of the cluster is known to reach (servers %v)", servers)
}
