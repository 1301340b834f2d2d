package monitor

import (
	"strings"
	"testing"
	"time"

	"github.com/steadyplane/steadyplane/pkg/fallback"
)

func TestDecide(t *testing.T) {
	ok := &Probe{OK: true, Body: "[+]ping ok\n[+]etcd ok\nreadyz check passed"}
	etcdDown := &Probe{Body: "[+]ping ok\n[-]etcd failed: reason withheld\n[+]poststarthook/start-apiextensions-informers ok\n"}
	hookPending := &Probe{Body: "[+]ping ok\n[+]etcd ok\n[-]poststarthook/steadyplane-test-never-finishes failed: reason withheld\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n"}
	good := &MirrorPod{Revision: "3", Ready: true}
	to := Timeouts{FirstStart: 30 * time.Second, Ready: 5 * time.Minute}
	early, late := 10*time.Second, 6*time.Minute
	// Last words of kube-apiserver v1.36 with the wrong etcd CA, and with
	// an audit policy it cannot parse (dials cancelled on the way out).
	etcd := []string{"127.0.0.1:2379"}
	etcdTLS := `W1123 10:18:54.117543       1 logging.go:55] [core] [Channel #1 SubChannel #3] grpc: addrConn.createTransport failed to connect to {Addr: "127.0.0.1:2379", ServerName: "127.0.0.1:2379", }. Err: connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`
	etcdCancelled := `W1123 10:16:42.220262       1 logging.go:55] [core] [Channel #1 SubChannel #2] grpc: addrConn.createTransport failed to connect to {Addr: "127.0.0.1:2379", ServerName: "127.0.0.1:2379", }. Err: connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:2379: operation was canceled"`
	running := func(o Observation) Observation {
		o.OperandRevision, o.StartAttempts, o.Running = "3", 1, true
		return o
	}
	cases := []struct {
		name    string
		o       Observation
		action  Action
		reason  fallback.Reason
		message string // a part of it
	}{
		{"another revision's manifest: wait, however long", Observation{OperandRevision: "2", Watched: late}, Wait, "", `revision "2"`},
		{"the fallback from this revision is in place (the monitor restarted after writing it): leave", Observation{OperandRevision: "2", OperandFallbackFor: "3"}, Leave, "", "fallen back"},
		{"a fallback from another revision: wait", Observation{OperandRevision: "2", OperandFallbackFor: "1", Watched: late}, Wait, "", `revision "2"`},
		{"no revision on the manifest: wait", Observation{Watched: late}, Wait, "", `revision ""`},
		{"a manifest the agent cannot run falls back at once", Observation{OperandRevision: "3", ManifestError: "yaml: line 3: did not find expected key"}, FallBack, fallback.NeverStartedUp, "did not find expected key"},
		{"a container the agent will not create falls back at once", Observation{OperandRevision: "3", StartRefused: "mount path /usr/x is inside the read-only /usr", Watched: early},
			FallBack, fallback.NeverStartedUp, "will not create the container of revision 3: mount path /usr/x"},
		{"the node agent does not answer: wait, even past the timeouts", Observation{OperandRevision: "3", AgentDown: true, Watched: late}, Wait, "", "does not answer"},
		{"no start attempt yet", Observation{OperandRevision: "3", Watched: early}, Wait, fallback.NeverStartedUp, "first start"},
		{"no start attempt within the first-start timeout", Observation{OperandRevision: "3", Watched: 30 * time.Second}, FallBack, fallback.NeverStartedUp, "within 30s"},
		{"a second start of an unhealthy server is a crash loop, at once", Observation{OperandRevision: "3", StartAttempts: 2, LastTermination: "exit code 1: unknown flag: --no-such-flag", Watched: early},
			FallBack, fallback.CrashLooping, "unknown flag: --no-such-flag"},
		{"a crash loop that gave up on an etcd server is etcd's (retried)", Observation{OperandRevision: "3", StartAttempts: 2, EtcdServers: etcd,
			LastTermination: etcdTLS + "\nError: error creating storage factory: context deadline exceeded", Watched: early},
			FallBack, fallback.EtcdUnhealthy, "etcd did not answer it: " + etcdTLS},
		{"a first exit that gave up on an etcd server decides at once", Observation{OperandRevision: "3", StartAttempts: 1, EtcdServers: etcd,
			LastTermination: etcdTLS + "\nError: error creating storage factory: context deadline exceeded", Watched: early},
			FallBack, fallback.EtcdUnhealthy, "exited, etcd did not answer it: " + etcdTLS},
		{"a first exit for another reason waits for the next start", Observation{OperandRevision: "3", StartAttempts: 1, EtcdServers: etcd,
			LastTermination: etcdCancelled + "\nError: loading audit policy file: failed decoding", Watched: early},
			Wait, fallback.Unhealthy, "does not answer"},
		{"etcd refuses the revision's TLS while it waits for etcd: at once", running(Observation{EtcdServers: etcd, Watched: early,
			EtcdTLSRefused: "127.0.0.1:2379: tls: failed to verify certificate: x509: certificate signed by unknown authority"}),
			FallBack, fallback.EtcdUnhealthy, "cannot reach etcd with its etcd client settings: 127.0.0.1:2379: tls: failed to verify"},
		{"a refused TLS does not matter once the server answers", running(Observation{EtcdServers: etcd, Watched: early, Healthz: ok, Readyz: ok, Mirror: good,
			EtcdTLSRefused: "x509: certificate signed by unknown authority"}), Ready, "", "ready"},
		{"a crash loop whose exit names the etcd server is etcd's", Observation{OperandRevision: "3", StartAttempts: 2, EtcdServers: etcd,
			LastTermination: `Error: dial tcp 127.0.0.1:2379: connect: connection refused`, Watched: early},
			FallBack, fallback.EtcdUnhealthy, "connection refused"},
		{"a crash loop with cancelled etcd dials on the way out is the revision's", Observation{OperandRevision: "3", StartAttempts: 2, EtcdServers: etcd,
			LastTermination: etcdCancelled + "\nError: loading audit policy file: failed decoding", Watched: early},
			FallBack, fallback.CrashLooping, "audit policy"},
		{"a crash loop for the revision's etcd flags (no dial failed) is the revision's", Observation{OperandRevision: "3", StartAttempts: 2, EtcdServers: etcd,
			LastTermination: "Error: error creating storage factory: open /nope/ca.crt: no such file or directory", Watched: early},
			FallBack, fallback.CrashLooping, "no such file"},
		{"a timeout while etcd was reached is the revision's", Observation{OperandRevision: "3", StartAttempts: 2, EtcdServers: etcd,
			LastTermination: etcdCancelled + "\nError: context deadline exceeded", Watched: early},
			FallBack, fallback.CrashLooping, "deadline exceeded"},
		{"a second start that is down between runs is a crash loop", Observation{OperandRevision: "3", StartAttempts: 2, Healthz: ok, Watched: early}, FallBack, fallback.CrashLooping, "started 2 times"},
		{"restarted by the agent's liveness kill (/livez failing for etcd): not a crash loop", running(Observation{StartAttempts: 3, LivenessKills: 2, Healthz: etcdDown, Watched: late}),
			FallBack, fallback.EtcdUnhealthy, "etcd"},
		{"a liveness kill and a crash: a crash loop", Observation{OperandRevision: "3", StartAttempts: 3, LivenessKills: 1, Watched: early}, FallBack, fallback.CrashLooping, "started 3 times"},
		{"restarted once, now running and healthy: not a crash loop", running(Observation{StartAttempts: 2, Healthz: ok, Readyz: ok, Mirror: good}), Ready, "", "ready"},
		{"started, /healthz not answering yet", running(Observation{Watched: early}), Wait, fallback.Unhealthy, "does not answer"},
		{"/healthz never answering", running(Observation{Watched: late}), FallBack, fallback.Unhealthy, "after 5m0s"},
		{"/healthz failing for a post-start hook only is readiness", running(Observation{Healthz: hookPending, Watched: late}), FallBack, fallback.NotReady, "poststarthook/steadyplane-test-never-finishes"},
		{"/healthz failing for a hook, before the timeout", running(Observation{Healthz: hookPending, Watched: early}), Wait, fallback.NotReady, "unfinished"},
		{"/healthz failing for a hook and another check is unhealthy", running(Observation{Healthz: &Probe{Body: "[-]log failed\n[-]poststarthook/x failed\n"}, Watched: late}), FallBack, fallback.Unhealthy, "log"},
		{"/healthz failing for etcd", running(Observation{Healthz: etcdDown, Watched: late}), FallBack, fallback.EtcdUnhealthy, "etcd"},
		{"/readyz failing for etcd, before the timeout", running(Observation{Healthz: ok, Readyz: etcdDown, Watched: early}), Wait, fallback.EtcdUnhealthy, "etcd"},
		{"/readyz failing for etcd", running(Observation{Healthz: ok, Readyz: etcdDown, Watched: late}), FallBack, fallback.EtcdUnhealthy, "unfinished: etcd"},
		{"/readyz failing for post-start hooks, named", running(Observation{Healthz: ok, Readyz: hookPending, Watched: late}), FallBack, fallback.NotReady,
			"poststarthook/steadyplane-test-never-finishes, poststarthook/rbac/bootstrap-roles"},
		{"/readyz not answering", running(Observation{Healthz: ok, Watched: late}), FallBack, fallback.NotReady, "/readyz does not answer"},
		{"no mirror pod yet", running(Observation{Healthz: ok, Readyz: ok, Watched: early}), Wait, fallback.NotReady, "no mirror pod"},
		{"no mirror pod in time", running(Observation{Healthz: ok, Readyz: ok, Watched: late}), FallBack, fallback.NotReady, "no mirror pod"},
		{"the mirror pod shows another revision", running(Observation{Healthz: ok, Readyz: ok, Mirror: &MirrorPod{Revision: "2", Ready: true}, Watched: late}), FallBack, fallback.NotReady, `revision "2"`},
		{"the mirror pod not Ready", running(Observation{Healthz: ok, Readyz: ok, Mirror: &MirrorPod{Revision: "3"}, Watched: late}), FallBack, fallback.NotReady, "not Ready"},
		{"ready", running(Observation{Healthz: ok, Readyz: ok, Mirror: good, Watched: early}), Ready, "", "revision 3 is ready"},
		{"ready, late", running(Observation{Healthz: ok, Readyz: ok, Mirror: good, Watched: late}), Ready, "", "ready"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Decide("3", c.o, to)
			if v.Action != c.action || v.Reason != c.reason || !strings.Contains(v.Message, c.message) {
				t.Errorf("Decide = %v %q %q, want %v %q with %q", v.Action, v.Reason, v.Message, c.action, c.reason, c.message)
			}
		})
	}
}

func TestFailedChecksNamesAnAnswerWithoutAList(t *testing.T) {
	if got := strings.Join(failedChecks("Internal Server Error"), ","); got != "(no check named)" {
		t.Errorf("failedChecks = %q", got)
	}
}
