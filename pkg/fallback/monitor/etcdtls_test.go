package monitor

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"strings"
	"testing"

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
	// A TLS listener with etcd's serving certificate, which completes
	// handshakes and nothing more.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
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
			_ = conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	gone := closed.Addr().String()
	closed.Close()
	pod := func(servers, ca string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Command: []string{"steadyplane", "apiserver",
			"--etcd-servers=" + servers, "--etcd-cafile=" + ca, "--etcd-certfile=" + c.APIServerEtcdClient.CertPath, "--etcd-keyfile=" + c.APIServerEtcdClient.KeyPath}}}}}
	}
	up := "https://" + ln.Addr().String()
	for _, tc := range []struct {
		name, servers, ca, want string
	}{
		{"the right CA", up, c.EtcdCA.CertPath, ""},
		{"the cluster CA instead of etcd's", up, c.CA.CertPath, "x509: certificate signed by unknown authority"},
		{"etcd not listening tells nothing", "https://" + gone, c.CA.CertPath, ""},
		{"one member accepts them", "https://" + gone + "," + up, c.EtcdCA.CertPath, ""},
		{"a CA file this monitor cannot read tells nothing", up, "/nonexistent/ca.crt", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := EtcdDialer{}.Refused(context.Background(), pod(tc.servers, tc.ca))
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("Refused = %q, want %q", got, tc.want)
			}
		})
	}
}
