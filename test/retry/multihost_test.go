package retry

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/steadyplane/steadyplane/internal/testnet"
	"github.com/steadyplane/steadyplane/internal/testpki"
	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/ifready/ifreadyclient"
)

// hostFault is what the first host (the one the client is configured with)
// does; the second host is healthy.
type hostFault struct {
	name  string
	start func(t *testing.T, p *testpki.TestPKI) (host string, reached func() int)
}

var hostFaults = []hostFault{
	{"refuses", func(t *testing.T, _ *testpki.TestPKI) (string, func() int) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		host := l.Addr().String()
		l.Close()
		return host, func() int { return 0 }
	}},
	{"resets", func(t *testing.T, p *testpki.TestPKI) (string, func() int) {
		fs := newFaultServer(t, p.CA, p.Store, fault{cut: "reset"}, fault{cut: "reset"}, fault{cut: "reset"})
		return fs.host(), func() int { return len(fs.seen()) }
	}},
	{"black-holes", func(t *testing.T, _ *testpki.TestPKI) (string, func() int) {
		return testnet.BlackHole(t, "127.0.0.1"), func() int { return 0 }
	}},
	{"answers 503 not ready", func(t *testing.T, p *testpki.TestPKI) (string, func() int) {
		nr := fault{status: 503, retryAfter: "1", notReady: true}
		fs := newFaultServer(t, p.CA, p.Store, nr, nr, nr)
		return fs.host(), func() int { return len(fs.seen()) }
	}},
}

// outcome is who answered a call and how often it reached each host.
type outcome struct {
	answeredBy    string // "second", or "error": the caller gets the first host's error
	reachedFirst  int
	reachedSecond int
}

func (o outcome) String() string {
	return fmt.Sprintf("answered by %s, reached first %d, second %d", o.answeredBy, o.reachedFirst, o.reachedSecond)
}

// multiHostTable: for each fault of the first host and each call, the
// outcome through the KEP-3037 round tripper. The rule behind it: a request
// that reached no server moves at once, any verb; a KEP-3028 refusal
// reached a server but is guaranteed unprocessed, so it moves too; a request
// cut off after reaching a server moves only if it is a GET, or when
// client-go itself retries it (a Watch of any verb).
var multiHostTable = map[string]map[string]outcome{
	"refuses": {
		"Do GET": {"second", 0, 1}, "Do POST": {"second", 0, 1}, "Watch GET": {"second", 0, 1},
		"Watch POST": {"second", 0, 1}, "Stream GET": {"second", 0, 1},
	},
	"resets": {
		"Do GET": {"second", 1, 1}, "Do POST": {"error", 1, 0}, "Watch GET": {"second", 1, 1},
		"Watch POST": {"second", 1, 1}, "Stream GET": {"second", 1, 1},
	},
	"black-holes": {
		"Do GET": {"second", 0, 1}, "Do POST": {"second", 0, 1}, "Watch GET": {"second", 0, 1},
		"Watch POST": {"second", 0, 1}, "Stream GET": {"second", 0, 1},
	},
	"answers 503 not ready": {
		"Do GET": {"second", 1, 1}, "Do POST": {"second", 1, 1}, "Watch GET": {"second", 1, 1},
		"Watch POST": {"second", 1, 1}, "Stream GET": {"second", 1, 1},
	},
}

// TestMultiHostRows runs every row of multiHostTable with the KEP-3037
// option alone and with both options: the KEP-3028 header changes nothing
// here.
func TestMultiHostRows(t *testing.T) {
	ops := []op{doGet, doPost, watchGet, watchPost, streamGet}
	for _, both := range []bool{false, true} {
		name := "altsvc"
		if both {
			name = "ifready+altsvc"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := testpki.New(t)
			for _, hf := range hostFaults {
				for _, o := range ops {
					first, reachedFirst := hf.start(t, p)
					second := newFaultServer(t, p.CA, p.Store)
					if strings.HasPrefix(o.name, "Watch") {
						second.watch = true
					}
					cfg := &rest.Config{
						Host: "https://" + first, TLSClientConfig: rest.TLSClientConfig{CAData: p.CA.CertPEM}, APIPath: "/api",
						ContentConfig: rest.ContentConfig{GroupVersion: &corev1.SchemeGroupVersion, NegotiatedSerializer: scheme.Codecs.WithoutConversion()},
						QPS:           1000, Burst: 1000, Timeout: 30 * time.Second,
					}
					if _, err := altsvcclient.Enable(cfg, altsvcclient.Options{
						Hosts: []string{first, second.host()}, DialTimeout: 300 * time.Millisecond, LocalAddresses: []net.IP{},
					}); err != nil {
						t.Fatal(err)
					}
					if both {
						ifreadyclient.Enable(cfg)
					}
					rc, err := rest.RESTClientFor(cfg)
					if err != nil {
						t.Fatal(err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					err = o.run(ctx, rc, 3)
					cancel()
					got := outcome{answeredBy: "second", reachedFirst: reachedFirst(), reachedSecond: len(second.seen())}
					if err != nil {
						got.answeredBy = "error"
					}
					want := multiHostTable[hf.name][o.name]
					if got.answeredBy != want.answeredBy || got.reachedFirst != want.reachedFirst || got.reachedSecond != want.reachedSecond {
						t.Errorf("first host %s / %s: %v (err %v); want %v", hf.name, o.name, got, err, want)
					}
					if want.answeredBy == "error" && (err == nil || !strings.Contains(err.Error(), first)) {
						t.Errorf("first host %s / %s: err %v, want the error of %s", hf.name, o.name, err, first)
					}
				}
			}
		})
	}
}
