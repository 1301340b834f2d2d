package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/steadyplane/steadyplane/pkg/procfs"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/internal/testci"
	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/controlplane"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/runc"
)

const (
	gate1 = "example.com/feature-1"
	gate2 = "example.com/feature-2"
)

// TestNodeAgent runs the real API server and "steadyplane node", and drives
// pods through client-go and kubectl as a user would.
func TestNodeAgent(t *testing.T) {
	ctx, cp, o, dir, cs := startNode(t)
	pods := cs.CoreV1().Pods("default")

	t.Run("readiness gates through client-go, every message in turn", func(t *testing.T) {
		pod := gatedPod("gates-client-go", gate1, gate2)
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitReady(ctx, t, cs, pod.Name, corev1.ConditionFalse, fmt.Sprintf(`corresponding condition of pod readiness gate %q does not exist., corresponding condition of pod readiness gate %q does not exist.`, gate1, gate2))
		setGates(ctx, t, cs, pod.Name, map[string]corev1.ConditionStatus{gate1: corev1.ConditionTrue, gate2: corev1.ConditionFalse})
		waitReady(ctx, t, cs, pod.Name, corev1.ConditionFalse, fmt.Sprintf(`the status of pod readiness gate %q is not "True", but False`, gate2))
		start := time.Now()
		setGates(ctx, t, cs, pod.Name, map[string]corev1.ConditionStatus{gate2: corev1.ConditionTrue})
		waitReady(ctx, t, cs, pod.Name, corev1.ConditionTrue, "")
		t.Logf("Ready seen %v after the last gate's PATCH (polled every 250ms; bench/readiness measures it through a watch)", time.Since(start).Round(time.Millisecond))
		got, _ := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if cr := condition(got, corev1.ContainersReady); cr == nil || cr.Status != corev1.ConditionTrue {
			t.Errorf("ContainersReady = %+v", cr)
		}
	})

	t.Run("readiness gates through kubectl", func(t *testing.T) {
		pod := gatedPod("gates-kubectl", gate1, gate2)
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitReady(ctx, t, cs, pod.Name, corev1.ConditionFalse, "")
		waitFor(ctx, t, time.Minute, "kubectl to show Running, gates 0/2", func() (bool, string) {
			out := kubectlOut(ctx, t, cp, "get", "pod", pod.Name, "-o", "wide", "--no-headers")
			f := strings.Fields(out)
			return len(f) >= 9 && f[1] == "1/1" && f[2] == "Running" && f[len(f)-1] == "0/2", out
		})
		for _, g := range []string{gate1, gate2} {
			patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True"}]}}`, g)
			kubectlOut(ctx, t, cp, "patch", "pod", pod.Name, "--subresource=status", "--type=strategic", "-p", patch)
		}
		waitReady(ctx, t, cs, pod.Name, corev1.ConditionTrue, "")
		if out := kubectlOut(ctx, t, cp, "get", "pod", pod.Name, "-o", "wide", "--no-headers"); !strings.HasSuffix(strings.TrimSpace(out), "2/2") {
			t.Errorf("kubectl get -o wide after the patches: %s", out)
		}
	})

	t.Run("another writer's condition survives 100 agent status writes", func(t *testing.T) {
		pod := gatedPod("other-writer", gate1)
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitReady(ctx, t, cs, pod.Name, corev1.ConditionFalse, "")
		setGates(ctx, t, cs, pod.Name, map[string]corev1.ConditionStatus{"example.com/other-writer": corev1.ConditionTrue})
		// Each flip of the gate makes the agent write Ready again.
		for i := 0; i < 100; i++ {
			want := corev1.ConditionTrue
			if i%2 == 1 {
				want = corev1.ConditionFalse
			}
			setGates(ctx, t, cs, pod.Name, map[string]corev1.ConditionStatus{gate1: want})
			waitReady(ctx, t, cs, pod.Name, want, "")
		}
		got, _ := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if c := condition(got, "example.com/other-writer"); c == nil || c.Status != corev1.ConditionTrue {
			t.Errorf("the other writer's condition after 100 agent writes: %+v", c)
		}
	})

	t.Run("a crash-looping container backs off and reports its exit", func(t *testing.T) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "crash"}, Spec: corev1.PodSpec{RuntimeClassName: testenv.HostRoot(), NodeName: o.NodeName, Containers: []corev1.Container{{
			Name: "c", Image: "local", Command: []string{"sh", "-c", "echo the end; exit 3"}, TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		}}}}
		created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, time.Minute, "CrashLoopBackOff", func() (bool, string) {
			p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil || len(p.Status.ContainerStatuses) == 0 {
				return false, fmt.Sprint(err)
			}
			s := p.Status.ContainerStatuses[0]
			ok := s.RestartCount >= 2 && s.State.Waiting != nil && s.State.Waiting.Reason == "CrashLoopBackOff" &&
				strings.HasPrefix(s.State.Waiting.Message, "back-off ") && s.LastTerminationState.Terminated != nil &&
				s.LastTerminationState.Terminated.ExitCode == 3 && s.LastTerminationState.Terminated.Message == "the end"
			b, _ := json.Marshal(s)
			return ok, string(b)
		})
		log := filepath.Join(dir, "node", "pods", fmt.Sprintf("default_crash_%s", created.UID), "c", "0.log")
		if b, err := os.ReadFile(log); err != nil || !strings.Contains(string(b), "the end") {
			t.Errorf("container log %s: %v %q", log, err, b)
		}
	})

	t.Run("an agent killed: the node goes unreachable, pods keep running; restarted, it runs each container exactly once", func(t *testing.T) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "survivor"}, Spec: corev1.PodSpec{RuntimeClassName: testenv.HostRoot(), NodeName: o.NodeName, Containers: []corev1.Container{{
			Name: "c", Image: "local", Command: []string{"sleep", "3601"},
		}}}}
		// The count is machine-wide: a "sleep 3601" a killed earlier run
		// left would pass for the survivor and make a second one look
		// like a duplicate.
		if n := countProcesses("sleep\x003601"); n != 0 {
			t.Fatalf("%d processes \"sleep 3601\" run before the test starts one (left by an earlier run?): the count would be wrong; kill them", n)
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, time.Minute, "one survivor process", func() (bool, string) {
			n := countProcesses("sleep\x003601")
			return n == 1, fmt.Sprintf("%d processes", n)
		})
		// While the agent is gone the controller manager's node lifecycle
		// controller marks the node unreachable (Ready Unknown and the
		// unreachable taint, after its 50s grace); the pods keep running.
		if err := cp.Node.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-cp.Node.Exited()
		stopped := time.Now()
		waitFor(ctx, t, 2*time.Minute, "the node Ready Unknown and tainted unreachable", func() (bool, string) {
			n, err := cs.CoreV1().Nodes().Get(ctx, o.NodeName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var ready corev1.NodeCondition
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					ready = c
				}
			}
			tainted := false
			for _, taint := range n.Spec.Taints {
				tainted = tainted || taint.Key == corev1.TaintNodeUnreachable
			}
			return ready.Status == corev1.ConditionUnknown && ready.Reason == "NodeStatusUnknown" && tainted, fmt.Sprintf("Ready %s %s, taints %v", ready.Status, ready.Reason, n.Spec.Taints)
		})
		t.Logf("node unreachable %v after the agent died", time.Since(stopped).Round(time.Second))
		if n := countProcesses("sleep\x003601"); n != 1 {
			t.Errorf("%d survivor processes while the agent was gone", n)
		}
		if err := cp.Node.Start(); err != nil {
			t.Fatal(err)
		}
		if err := cp.WaitNodeReady(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, time.Minute, "the unreachable taint removed", func() (bool, string) {
			n, err := cs.CoreV1().Nodes().Get(ctx, o.NodeName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, taint := range n.Spec.Taints {
				if taint.Key == corev1.TaintNodeUnreachable {
					return false, fmt.Sprintf("taints %v", n.Spec.Taints)
				}
			}
			return true, ""
		})
		waitFor(ctx, t, time.Minute, "the survivor running again", func() (bool, string) {
			n := countProcesses("sleep\x003601")
			return n == 1, fmt.Sprintf("%d processes", n)
		})
		for i := 0; i < 10; i++ {
			if n := countProcesses("sleep\x003601"); n != 1 {
				got, _ := pods.Get(ctx, pod.Name, metav1.GetOptions{})
				cdir := filepath.Join(dir, "node", "pods", fmt.Sprintf("default_survivor_%s", got.UID), "c")
				monitorLog, _ := os.ReadFile(filepath.Join(cdir, "monitor.log"))
				run, _ := os.ReadFile(filepath.Join(cdir, "run.json"))
				t.Fatalf("sample %d: %d copies of the container; status %+v; run.json %s; monitor.log:\n%s", i, n, got.Status.ContainerStatuses, run, monitorLog)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("runc pods: own addresses, isolation, limits, volumes, adopted by a restarted agent", func(t *testing.T) {
		if _, err := runc.Available(); err != nil {
			testci.CannotRun(t, "runc pods: %v", err)
		}
		mode := int32(0o600)
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web-config"}, Data: map[string]string{"greeting": "hello"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "web-secret"}, StringData: map[string]string{"password": "s3cret"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("py-%d", i)}, Spec: corev1.PodSpec{RuntimeClassName: testenv.HostRoot(), NodeName: o.NodeName, TerminationGracePeriodSeconds: &shortGrace,
				Volumes: []corev1.Volume{
					{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}}}},
					{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "web-secret", DefaultMode: &mode}}},
				},
				Containers: []corev1.Container{{Name: "web", Image: "local/python", Command: []string{"/usr/bin/python3", "-m", "http.server", "8080"}, WorkingDir: "/",
					VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/config"}, {Name: "secret", MountPath: "/secret"}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}}}}}
			if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		ips := map[string]string{}
		waitFor(ctx, t, 2*time.Minute, "three python pods Ready with their own addresses", func() (bool, string) {
			for i := 0; i < 3; i++ {
				p, err := pods.Get(ctx, fmt.Sprintf("py-%d", i), metav1.GetOptions{})
				if err != nil || p.Status.PodIP == "" || p.Status.PodIP == o.NodeIP || condition(p, corev1.PodReady) == nil || condition(p, corev1.PodReady).Status != corev1.ConditionTrue {
					return false, fmt.Sprint(err, " ", p.Status.PodIP)
				}
				ips[p.Name] = p.Status.PodIP
			}
			return len(ips) == 3, fmt.Sprint(ips)
		})
		if ips["py-0"] == ips["py-1"] || ips["py-1"] == ips["py-2"] || ips["py-0"] == ips["py-2"] {
			t.Fatalf("pods share addresses: %v", ips)
		}
		for name, ip := range ips {
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + ip + ":8080/config/greeting")
			if err != nil {
				t.Fatalf("%s on %s:8080: %v", name, ip, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "hello" {
				t.Errorf("%s serves /config/greeting = %q", name, body)
			}
		}
		out, err := execOutput(ctx, "runc", "--root", filepath.Join(dir, "node", "runc"), "exec", findContainer(t, ctx, cs, "py-0"), "sh", "-c",
			"stat -L -c '%a %n' /config/greeting /secret/password; cat /secret/password; echo; ls "+dir+" 2>&1; id -u")
		if err != nil {
			t.Fatalf("runc exec: %v: %s", err, out)
		}
		for _, want := range []string{"644 /config/greeting", "600 /secret/password", "s3cret", "No such file or directory"} {
			if !strings.Contains(out, want) {
				t.Errorf("inside the pod, want %q in:\n%s", want, out)
			}
		}

		hog := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hog"}, Spec: corev1.PodSpec{RuntimeClassName: testenv.HostRoot(), NodeName: o.NodeName, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "hog", Image: "local/python", Command: []string{"/usr/bin/python3", "-c", "b = []\nwhile True: b.append(bytearray(1 << 20))"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("50Mi")}}}}}}
		if _, err := pods.Create(ctx, hog, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, time.Minute, "the memory hog OOMKilled", func() (bool, string) {
			p, err := pods.Get(ctx, "hog", metav1.GetOptions{})
			if err != nil || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Terminated == nil {
				return false, fmt.Sprint(err)
			}
			term := p.Status.ContainerStatuses[0].State.Terminated
			return term.Reason == "OOMKilled" && term.ExitCode == 137, fmt.Sprintf("%s %d", term.Reason, term.ExitCode)
		})

		// kill -9 of the agent: the containers go on, the new agent adopts them.
		restartNodeAgent(t, cp, syscall.SIGKILL)
		if err := cp.WaitNodeReady(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		for name, ip := range ips {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Status.PodIP != ip || p.Status.ContainerStatuses[0].RestartCount != 0 || p.Status.ContainerStatuses[0].State.Running == nil {
				t.Errorf("%s after the agent's SIGKILL: ip %s (was %s), restarts %d, state %+v", name, p.Status.PodIP, ip, p.Status.ContainerStatuses[0].RestartCount, p.Status.ContainerStatuses[0].State)
			}
		}
		for i := 0; i < 3; i++ {
			_ = pods.Delete(ctx, fmt.Sprintf("py-%d", i), metav1.DeleteOptions{})
		}
		_ = pods.Delete(ctx, "hog", metav1.DeleteOptions{})
	})

	t.Run("kubectl logs, exec and port-forward through the node API; only authorized callers", func(t *testing.T) {
		if _, err := runc.Available(); err != nil {
			testci.CannotRun(t, "runc pods: %v", err)
		}
		testNodeAPI(ctx, t, cp, o, dir, cs)
	})

	t.Run("a RestartPolicy Never pod stopped with the agent does not run again", func(t *testing.T) {
		runsDir := t.TempDir()
		runs := filepath.Join(runsDir, "runs")
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "once"}, Spec: corev1.PodSpec{RuntimeClassName: testenv.HostRoot(), NodeName: o.NodeName, RestartPolicy: corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &shortGrace, Volumes: []corev1.Volume{hostDir("runs", runsDir)},
			Containers: []corev1.Container{{Name: "c", Image: "local", Command: []string{"sh", "-c", "echo run >> /runs/runs; exec sleep 3602"},
				VolumeMounts: []corev1.VolumeMount{{Name: "runs", MountPath: "/runs"}}}}}}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, time.Minute, "once running", func() (bool, string) {
			n := countProcesses("sleep\x003602")
			return n == 1, fmt.Sprintf("%d processes", n)
		})
		restartNodeAgent(t, cp, syscall.SIGTERM) // SIGTERM: it stops its pods
		if err := cp.WaitNodeReady(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, time.Minute, "once reported Failed", func() (bool, string) {
			p, err := pods.Get(ctx, "once", metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodFailed, fmt.Sprint(err, p.Status.Phase)
		})
		time.Sleep(3 * time.Second) // time for a wrong restart to show
		if b, _ := os.ReadFile(runs); strings.Count(string(b), "run") != 1 || countProcesses("sleep\x003602") != 0 {
			t.Errorf("the Never pod ran %d times (%d running)", strings.Count(string(b), "run"), countProcesses("sleep\x003602"))
		}
	})

	t.Run("a liveness kill does not hold the pod's other containers", func(t *testing.T) {
		dir := t.TempDir()
		kill, ready := filepath.Join(dir, "kill-me"), filepath.Join(dir, "ready")
		grace := int64(30)
		flags := []corev1.VolumeMount{{Name: "flags", MountPath: "/flags"}}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "slow-kill"}, Spec: corev1.PodSpec{RuntimeClassName: testenv.HostRoot(), NodeName: o.NodeName, TerminationGracePeriodSeconds: &grace,
			Volumes: []corev1.Volume{hostDir("flags", dir)},
			Containers: []corev1.Container{
				{Name: "stubborn", Image: "local", Command: []string{"sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"}, VolumeMounts: flags,
					LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "test ! -f /flags/kill-me"}}}, PeriodSeconds: 1, FailureThreshold: 1}},
				{Name: "other", Image: "local", Command: []string{"sleep", "3603"}, VolumeMounts: flags,
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/flags/ready"}}}, PeriodSeconds: 1}},
			}}}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer pods.Delete(context.Background(), "slow-kill", *metav1.NewDeleteOptions(0))
		waitFor(ctx, t, time.Minute, "slow-kill running", func() (bool, string) {
			p, err := pods.Get(ctx, "slow-kill", metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, fmt.Sprint(err)
		})
		os.WriteFile(kill, nil, 0o600)
		waitFor(ctx, t, 10*time.Second, "the liveness Killing event", func() (bool, string) {
			evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=slow-kill,reason=Killing"})
			return err == nil && len(evs.Items) > 0, fmt.Sprint(err)
		})
		os.WriteFile(ready, nil, 0o600)
		// The stubborn container takes its whole 30s grace period to die;
		// the other container's readiness must show long before.
		start := time.Now()
		waitFor(ctx, t, 10*time.Second, "other ready during the kill", func() (bool, string) {
			p, err := pods.Get(ctx, "slow-kill", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, s := range p.Status.ContainerStatuses {
				if s.Name == "other" && s.Ready {
					return true, ""
				}
			}
			return false, "not ready"
		})
		t.Logf("other container Ready %v after its probe passed, during the stubborn one's 30s stop", time.Since(start).Round(time.Millisecond))
		// The node's own record tells the agent's kill from a crash (the
		// startup monitor does not count it as a crash loop).
		waitFor(ctx, t, 10*time.Second, "the liveness kill in the local record", func() (bool, string) {
			rec := diskRecord(t, o, "default", "slow-kill")
			if rec == nil {
				return false, "no record"
			}
			return rec.LivenessKills["stubborn"] == 1 && rec.LivenessKills["other"] == 0, fmt.Sprintf("liveness kills %v", rec.LivenessKills)
		})
	})

	t.Run("the webhook injects the load-balancer gate, which follows an outside HTTP check", func(t *testing.T) {
		if err := cp.StartReadinessController(ctx); err != nil {
			t.Fatal(err)
		}
		for name, labels := range map[string]map[string]string{"team": {"steadyplane.io/readiness-gates": "on"}, "plain": nil} {
			if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		www := t.TempDir()
		health := filepath.Join(www, "health.txt")
		if err := os.WriteFile(health, []byte("ok"), 0o600); err != nil {
			t.Fatal(err)
		}
		ports, err := testenv.FreePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		port := fmt.Sprint(ports[0])
		// The gate dials a hostNetwork pod at its node's address: the
		// harness's own, on its pod bridge.
		bind := nodeIP(ctx, t, cs, o.NodeName)
		web := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{"steadyplane.io/load-balancer-port": port, "steadyplane.io/load-balancer-path": "/health.txt"}},
			// The host's network: the gate checks the pod's address, the node's here.
			Spec: corev1.PodSpec{RuntimeClassName: testenv.HostRoot(), NodeName: o.NodeName, HostNetwork: true, TerminationGracePeriodSeconds: &shortGrace, Volumes: []corev1.Volume{hostDir("www", www)},
				Containers: []corev1.Container{{
					Name: "web", Image: "local/python", WorkingDir: "/www", Command: []string{"python3", "-m", "http.server", port, "--bind", bind},
					VolumeMounts: []corev1.VolumeMount{{Name: "www", MountPath: "/www"}},
				}}},
		}
		created, err := cs.CoreV1().Pods("team").Create(ctx, web, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(created.Spec.ReadinessGates) != 1 || created.Spec.ReadinessGates[0].ConditionType != "steadyplane.io/load-balancer-ready" {
			t.Fatalf("gates of a pod in a labelled namespace: %+v", created.Spec.ReadinessGates)
		}
		other := gatedPod("other")
		other.Spec.NodeName = o.NodeName
		if p, err := cs.CoreV1().Pods("plain").Create(ctx, other, metav1.CreateOptions{}); err != nil || len(p.Spec.ReadinessGates) != 0 {
			t.Fatalf("pod in an unlabelled namespace: %v, gates %+v", err, p.Spec.ReadinessGates)
		}
		readyIn := func(want corev1.ConditionStatus, message string) {
			t.Helper()
			waitFor(ctx, t, time.Minute, fmt.Sprintf("web Ready=%s", want), func() (bool, string) {
				p, err := cs.CoreV1().Pods("team").Get(ctx, "web", metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				c := condition(p, corev1.PodReady)
				if c == nil {
					return false, "no Ready"
				}
				return c.Status == want && (message == "" || c.Message == message), c.Message
			})
		}
		readyIn(corev1.ConditionTrue, "")
		os.Remove(health)
		readyIn(corev1.ConditionFalse, `the status of pod readiness gate "steadyplane.io/load-balancer-ready" is not "True", but False`)
	})

	t.Run("static pods follow their manifest file", func(t *testing.T) {
		manifests := filepath.Join(dir, "manifests")
		mirror := "static-web-" + o.NodeName
		write := func(name, content string) {
			if err := os.WriteFile(filepath.Join(manifests, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		manifest := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: static-web\nspec:\n  runtimeClassName: steadyplane-host\n  containers:\n  - name: c\n    image: local\n    command: [sleep, \"3600\"]\n"
		write("web.yaml", manifest)
		write("broken.yaml", "kind: [")
		var firstUID types.UID
		waitFor(ctx, t, time.Minute, "the mirror pod, Running", func() (bool, string) {
			p, err := pods.Get(ctx, mirror, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			firstUID = p.UID
			return p.Annotations["kubernetes.io/config.mirror"] != "" && p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
		})
		waitFor(ctx, t, time.Minute, "a StaticPodInvalid event", func() (bool, string) {
			evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=StaticPodInvalid"})
			return err == nil && len(evs.Items) > 0 && strings.Contains(evs.Items[0].Message, "broken.yaml"), fmt.Sprint(err)
		})
		// Delete the mirror: it comes back.
		if err := pods.Delete(ctx, mirror, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, time.Minute, "the mirror pod back", func() (bool, string) {
			p, err := pods.Get(ctx, mirror, metav1.GetOptions{})
			return err == nil && p.UID != firstUID && p.DeletionTimestamp == nil, fmt.Sprint(err)
		})
		// Edit: a new hash and the new command.
		write("web.yaml", strings.Replace(manifest, `"3600"`, `"3601"`, 1))
		waitFor(ctx, t, time.Minute, "the edited mirror pod", func() (bool, string) {
			p, err := pods.Get(ctx, mirror, metav1.GetOptions{})
			return err == nil && len(p.Spec.Containers) == 1 && p.Spec.Containers[0].Command[1] == "3601" && p.Status.Phase == corev1.PodRunning, fmt.Sprint(err)
		})
		// Remove the file: the mirror and the process go.
		os.Remove(filepath.Join(manifests, "web.yaml"))
		waitFor(ctx, t, time.Minute, "the mirror pod gone", func() (bool, string) {
			_, err := pods.Get(ctx, mirror, metav1.GetOptions{})
			return err != nil, "still there"
		})
	})

	t.Run("static pods run without an API server, one pod per name, replaced in order", func(t *testing.T) {
		manifests := filepath.Join(dir, "manifests")
		write := func(name, content string) {
			t.Helper()
			if err := os.WriteFile(filepath.Join(manifests, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		manifest := func(name, seconds string) string {
			return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\nspec:\n  runtimeClassName: steadyplane-host\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: c\n    image: local\n    command: [sleep, \"" + seconds + "\"]\n"
		}
		running := func(seconds string) int { return countProcesses("sleep\x00" + seconds) }
		defer func() {
			for _, f := range []string{"keep.yaml", "offline.yaml", "dup.yaml"} {
				os.Remove(filepath.Join(manifests, f))
			}
		}()
		write("keep.yaml", manifest("keep", "3605"))
		waitFor(ctx, t, time.Minute, "keep running", func() (bool, string) { return running("3605") == 1, "" })

		// The API server goes away, and the node agent restarts meanwhile.
		if !cp.APIServer.Stop(20 * time.Second) {
			t.Log("apiserver had to be killed")
		}
		restartNodeAgent(t, cp, syscall.SIGTERM)
		write("offline.yaml", manifest("offline", "3604"))
		waitFor(ctx, t, 30*time.Second, "static pods running with no API server", func() (bool, string) {
			return running("3605") == 1 && running("3604") == 1, fmt.Sprintf("keep %d, offline %d", running("3605"), running("3604"))
		})
		// What a startup monitor reads while the API server is down: start
		// attempts, and a crash loop's exit code and termination message.
		write("crash.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: crash\nspec:\n  runtimeClassName: steadyplane-host\n  containers:\n  - name: c\n    image: local\n    command: [sh, -c, 'echo unknown flag --no-such-flag > /dev/termination-log; exit 1']\n")
		waitFor(ctx, t, 30*time.Second, "the crash loop in the local record", func() (bool, string) {
			rec := localRecord(ctx, t, o, "crash-"+o.NodeName)
			if rec == nil || len(rec.Status.ContainerStatuses) != 1 {
				return false, "no record"
			}
			last := rec.Status.ContainerStatuses[0].LastTerminationState.Terminated
			if rec.StartAttempts["c"] < 2 || last == nil {
				return false, fmt.Sprintf("attempts %v", rec.StartAttempts)
			}
			return last.ExitCode == 1 && strings.Contains(last.Message, "unknown flag --no-such-flag"), fmt.Sprintf("last %+v", last)
		})
		if rec := localRecord(ctx, t, o, "offline-"+o.NodeName); rec == nil || rec.StartAttempts["c"] != 1 || !rec.Static {
			t.Errorf("local record of the offline static pod = %+v, want static with 1 start attempt", rec)
		}
		os.Remove(filepath.Join(manifests, "crash.yaml"))

		// Edited: the old pod stops before the new one starts.
		write("keep.yaml", manifest("keep", "3606"))
		deadline := time.Now().Add(30 * time.Second)
		for running("3606") != 1 {
			if running("3605") > 0 && running("3606") > 0 {
				t.Fatal("old and new static pod ran at once")
			}
			if time.Now().After(deadline) {
				t.Fatalf("the edited static pod never started")
			}
			time.Sleep(50 * time.Millisecond)
		}
		// A second manifest for the same pod name is refused.
		write("dup.yaml", manifest("keep", "3607"))
		time.Sleep(2 * time.Second)
		if running("3607") != 0 || running("3606") != 1 {
			t.Errorf("a duplicate pod name ran: %d, original %d", running("3607"), running("3606"))
		}

		// The API server comes back: the Node and the mirror pods follow.
		if err := cp.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
		if err := cp.WaitNodeReady(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, time.Minute, "mirror pods of the static pods started without an API", func() (bool, string) {
			for _, name := range []string{"offline-" + o.NodeName, "keep-" + o.NodeName} {
				p, err := pods.Get(ctx, name, metav1.GetOptions{})
				if err != nil || p.Status.Phase != corev1.PodRunning {
					return false, fmt.Sprint(name, err)
				}
			}
			return true, ""
		})
		waitFor(ctx, t, time.Minute, "the duplicate reported", func() (bool, string) {
			evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=StaticPodInvalid"})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range evs.Items {
				if strings.Contains(e.Message, "dup.yaml") && strings.Contains(e.Message, "already defined by") {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d events", len(evs.Items))
		})
		// An invalid edit stops the pod it replaced, as with the kubelet.
		write("keep.yaml", "kind: [")
		waitFor(ctx, t, time.Minute, "keep stopped after an invalid edit", func() (bool, string) {
			return running("3606") == 0 && running("3607") == 1, fmt.Sprintf("keep %d, dup %d", running("3606"), running("3607"))
		})
	})
}

// restartNodeAgent stops the node agent with sig, waits for it to exit, and
// starts it again.
// startNode starts a control plane and its node agent, and returns a
// client of the admin's; the node's log is shown when the test fails.
func startNode(t *testing.T) (context.Context, *controlplane.ControlPlane, controlplane.Options, string, kubernetes.Interface) {
	t.Helper()
	ctx, cp, o, dir := startControlPlane(t)
	if err := cp.Node.Start(); err != nil {
		t.Fatal(err)
	}
	if err := cp.WaitNodeReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node log:\n%s", cp.Node.LogTail(40))
		}
	})
	cfg, err := cp.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	return ctx, cp, o, dir, kubernetes.NewForConfigOrDie(cfg)
}

func restartNodeAgent(t *testing.T, cp *controlplane.ControlPlane, sig syscall.Signal) {
	t.Helper()
	if err := cp.Node.Signal(sig); err != nil {
		t.Fatal(err)
	}
	// Its pods' grace periods are 2s; a stop that takes minutes is a hang.
	select {
	case <-cp.Node.Exited():
	case <-time.After(2 * time.Minute):
		t.Fatalf("the node agent did not exit within 2m of %v; see %s", sig, cp.Node.LogPath)
	}
	if err := cp.Node.Start(); err != nil {
		t.Fatal(err)
	}
}

func gatedPod(name string, gates ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{RuntimeClassName: testenv.HostRoot(), NodeName: "steadyplane", TerminationGracePeriodSeconds: &shortGrace, Containers: []corev1.Container{{
			Name: "c", Image: "local", Command: []string{"sleep", "3600"},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 1},
		}}},
	}
	for _, g := range gates {
		p.Spec.ReadinessGates = append(p.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: corev1.PodConditionType(g)})
	}
	return p
}

// shortGrace keeps test pods whose main process ignores SIGTERM (sleep as
// PID 1 of its namespace) from holding the agent's stop for 30s.
var shortGrace = int64(2)

// hostDir is a hostPath volume of a test directory.
// nodeIP is the InternalIP of the node name.
func nodeIP(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	t.Fatalf("node %s has no InternalIP: %v", name, n.Status.Addresses)
	return ""
}

func hostDir(name, path string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
}

func condition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// setGates PATCHes custom conditions on the status subresource, as a
// readiness-gate controller does.
func setGates(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, gates map[string]corev1.ConditionStatus) {
	t.Helper()
	var conds []corev1.PodCondition
	for g, s := range gates {
		conds = append(conds, corev1.PodCondition{Type: corev1.PodConditionType(g), Status: s, LastTransitionTime: metav1.Now()})
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
	if _, err := cs.CoreV1().Pods("default").Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

// waitReady waits until the pod's Ready condition has status want (and
// message, when given).
func waitReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, want corev1.ConditionStatus, message string) {
	t.Helper()
	waitFor(ctx, t, time.Minute, fmt.Sprintf("%s Ready=%s %q", name, want, message), func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := condition(p, corev1.PodReady)
		if c == nil {
			return false, "no Ready condition"
		}
		return c.Status == want && (message == "" || c.Message == message), fmt.Sprintf("Ready=%s %s %q", c.Status, c.Reason, c.Message)
	})
}

func kubectlOut(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, args ...string) string {
	t.Helper()
	k, err := testenv.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	out, err := execOutput(ctx, k, append([]string{"--kubeconfig", cp.Kubeconfig()}, args...)...)
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
	return out
}

// countProcesses counts processes whose NUL-separated command line contains s.
func countProcesses(s string) int {
	return len(procfs.Find(func(argv []string) bool { return strings.Contains(strings.Join(argv, "\x00"), s) }))
}

func execOutput(ctx context.Context, name string, args ...string) (string, error) {
	b, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(b), err
}

// findContainer returns the runc id of pod name's first container.
func findContainer(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string) string {
	t.Helper()
	p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil || len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s: %v", name, err)
	}
	return strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "runc://")
}
