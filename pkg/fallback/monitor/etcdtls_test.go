package monitor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/steadyplane/steadyplane/pkg/pki"
)

func TestEtcdDialerRefused(t *testing.T) {
	c, err := (&pki.Store{Dir: filepath.Join(t.TempDir(), "pki")}).EnsureCluster(pki.ClusterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(c.EtcdServer.CertPEM, c.EtcdServer.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	// A TLS listener with etcd's serving certificate that, as etcd does,
	// wants a client certificate from the etcd CA, and answers one read.
	roots := x509.NewCertPool()
	roots.AddCert(c.EtcdCA.Cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			if conn.(*tls.Conn).Handshake() == nil {
				_, _ = conn.Read(make([]byte, 64))
				_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\n\r\n"))
			}
			conn.Close()
		}
	}()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	gone := closed.Addr().String()
	closed.Close()
	// A listener that accepts and never answers: a member that hangs.
	silent, _ := net.Listen("tcp", "127.0.0.1:0")
	defer silent.Close()
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
		}
	}()
	pod := func(servers, ca, cert, key string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Command: []string{"steadyplane", "apiserver",
			"--etcd-servers=" + servers, "--etcd-cafile=" + ca, "--etcd-certfile=" + cert, "--etcd-keyfile=" + key}}}}}
	}
	up := "https://" + ln.Addr().String()
	etcdCert, etcdKey := c.APIServerEtcdClient.CertPath, c.APIServerEtcdClient.KeyPath
	// The admin's certificate is from the cluster CA, which etcd does not trust.
	adminCert, adminKey := c.Admin.CertPath, c.Admin.KeyPath
	for _, tc := range []struct {
		name, servers, ca, cert, key, want string
	}{
		{"the right settings", up, c.EtcdCA.CertPath, etcdCert, etcdKey, ""},
		{"the cluster CA instead of etcd's", up, c.CA.CertPath, etcdCert, etcdKey, "x509: certificate signed by unknown authority"},
		{"a client certificate etcd does not trust (TLS 1.3: refused after the handshake)", up, c.EtcdCA.CertPath, adminCert, adminKey, "tls:"},
		{"etcd not listening tells nothing", "https://" + gone, c.CA.CertPath, etcdCert, etcdKey, ""},
		{"a member that hangs tells nothing", "https://" + silent.Addr().String(), c.CA.CertPath, etcdCert, etcdKey, ""},
		{"one member accepts them", "https://" + gone + "," + up, c.EtcdCA.CertPath, etcdCert, etcdKey, ""},
		{"a CA file this monitor cannot read tells nothing", up, "/nonexistent/ca.crt", etcdCert, etcdKey, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := EtcdDialer{Timeout: 500 * time.Millisecond}.Refused(context.Background(), pod(tc.servers, tc.ca, tc.cert, tc.key))
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("Refused = %q, want %q", got, tc.want)
			}
		})
	}
}
