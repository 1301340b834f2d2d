package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/steadyplane/steadyplane/internal/testup"
)

// TestStorageMetricsLoadBalancers runs the README's "Storage, metrics and
// load balancers" verbatim on "steadyplane up", with a restart of up where
// the README says the data outlives one:
//   - the node's /metrics/resource, through the API server's node proxy,
//     has the CPU time of the web pod's container;
//   - kubectl top shows the node and the web pod, and the metrics API has
//     every running pod within a minute; an autoscaler takes a CPU burner
//     to three replicas and back to one (the walkthrough's kubectl wait
//     fails the script otherwise);
//   - a claim of the default StorageClass is bound to a local volume on the
//     node, written by one pod and read by the next after the first is
//     deleted and up restarted; deleting the claim removes the directory
//     (local-path), or keeps it (local-path-retain);
//   - a LoadBalancer Service gets the node's address and answers there
//     through kube-proxy, from the machine; a second one on the same port
//     stays pending with a PortConflict condition and Event naming the
//     first.
func TestStorageMetricsLoadBalancers(t *testing.T) {
	block := testup.ReadmeBlock(t, "Storage, metrics and load balancers")
	const restartAt = "# The data outlives the pod"
	i := strings.Index(block, restartAt)
	if i < 0 {
		t.Fatalf("the walkthrough has no %q step", restartAt)
	}
	ctx, dataDir, script, restart := testup.StartRestartableWalkthrough(t, 15*time.Minute)
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dataDir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)

	out := script("the README's walkthrough, to the written volume", block[:i])
	bound := false
	for _, l := range strings.Split(out, "\n") {
		// NAME  STATUS  VOLUME  CAPACITY  ACCESS MODES  STORAGECLASS  ...
		if f := strings.Fields(l); len(f) >= 6 && f[0] == "data" {
			bound = f[1] == "Bound" && f[3] == "1Gi" && f[5] == "local-path"
		}
	}
	if !bound {
		t.Errorf("kubectl get pvc data: want Bound, 1Gi, local-path")
	}
	pvc, err := cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(dataDir, "node", "storage", pv.Name)
	if pv.Spec.Local == nil || pv.Spec.Local.Path != dir {
		t.Fatalf("volume %s: %+v; want a local volume at %s", pv.Name, pv.Spec.PersistentVolumeSource, dir)
	}
	written, err := os.ReadFile(filepath.Join(dir, "written"))
	if err != nil || len(written) == 0 {
		t.Fatalf("the writer's file on the node: %q, %v", written, err)
	}

	restart()
	out = script("the README's walkthrough, after a restart of up", "export KUBECONFIG=$PWD/.steadyplane/admin.kubeconfig\n"+block[i:])
	if !strings.Contains(out, strings.TrimSpace(string(written))) {
		t.Errorf("the reader did not print what the writer wrote (%q) after the pod's deletion and a restart of up", strings.TrimSpace(string(written)))
	}
	nodeIP := ""
	node, err := cs.CoreV1().Nodes().Get(ctx, "steadyplane", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}
	var external, answered, conflict, measured, topNode, topPod, scaledUp, scaledDown, scaled bool
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		// NAME  CPU(cores)  CPU(%)  MEMORY(bytes)  MEMORY(%)
		topNode = topNode || len(f) == 5 && f[0] == "steadyplane" && strings.HasSuffix(f[1], "m") && strings.HasSuffix(f[3], "Mi")
		// NAME  CPU(cores)  MEMORY(bytes), without headers
		topPod = topPod || len(f) == 3 && strings.HasPrefix(f[0], "web-") && strings.HasSuffix(f[1], "m") && strings.HasSuffix(f[2], "Mi")
		// The walkthrough waits for 3 replicas, then for 1 (a timeout
		// fails the script), then shows the Deployment: NAME READY
		// UP-TO-DATE AVAILABLE AGE, READY x/1 (x counts pods not gone yet).
		scaledUp = scaledUp || l == "horizontalpodautoscaler.autoscaling/burn condition met"
		scaledDown = scaledDown || scaledUp && l == "deployment.apps/burn condition met"
		scaled = scaled || scaledDown && len(f) == 5 && f[0] == "burn" && strings.HasSuffix(f[1], "/1")
		// container_cpu_usage_seconds_total{container="busybox",namespace="default",pod="web-..."} <seconds> <ms>
		if f := strings.Fields(l); len(f) == 3 && strings.HasPrefix(f[0], `container_cpu_usage_seconds_total{container="busybox",namespace="default",pod="web-`) {
			v, err := strconv.ParseFloat(f[1], 64)
			measured = err == nil && v > 0
		}
		// NAME  TYPE  CLUSTER-IP  EXTERNAL-IP  PORT(S)  AGE
		if f := strings.Fields(l); len(f) == 6 && f[0] == "web" && f[1] == "LoadBalancer" {
			external = f[3] == nodeIP
		}
		answered = answered || strings.HasPrefix(l, "hello from web-")
		conflict = conflict || strings.Contains(l, "80/TCP on node steadyplane is held by Service default/web (LoadBalancer)")
	}
	if !external || !answered || !conflict {
		t.Errorf("load balancers: EXTERNAL-IP the node's address %s %v, a pod answered there %v, the second Service's PortConflict names the first %v; want all", nodeIP, external, answered, conflict)
	}
	if !measured {
		t.Errorf("the node's /metrics/resource has no CPU time of the web pod's container")
	}
	if !topNode || !topPod || !scaled {
		t.Errorf("kubectl top nodes shows the node %v, kubectl top pods the web pod %v; the autoscaler back at 1 replica %v; want all", topNode, topPod, scaled)
	}
	// Every pod that runs has its figures in the metrics API within a
	// minute: two scrapes of its node.
	metrics := metricsclient.NewForConfigOrDie(cfg)
	testup.WaitFor(t, ctx, time.Minute, "every running pod in the metrics API", func() (bool, string) {
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Running"})
		if err != nil {
			return false, err.Error()
		}
		got, err := metrics.MetricsV1beta1().PodMetricses("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		have := map[string]bool{}
		for _, m := range got.Items {
			have[m.Namespace+"/"+m.Name] = len(m.Containers) > 0
		}
		var missing []string
		for _, p := range pods.Items {
			if started := p.Status.StartTime; started != nil && time.Since(started.Time) > time.Minute && !have[p.Namespace+"/"+p.Name] {
				missing = append(missing, p.Namespace+"/"+p.Name)
			}
		}
		return len(missing) == 0, "no metrics for " + strings.Join(missing, ", ")
	})
	// The aggregation layer's front proxy, which extension API servers
	// (metrics-server) trust: its CA and name published for them.
	auth, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	frontProxyCA, err := os.ReadFile(filepath.Join(dataDir, "pki", "front-proxy-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(auth.Data["requestheader-allowed-names"], `"front-proxy-client"`) ||
		!strings.Contains(auth.Data["requestheader-client-ca-file"], strings.TrimSpace(string(frontProxyCA))) {
		t.Errorf("extension-apiserver-authentication: allowed names %q, and the front-proxy CA in the request-header CAs: %v",
			auth.Data["requestheader-allowed-names"], strings.Contains(auth.Data["requestheader-client-ca-file"], strings.TrimSpace(string(frontProxyCA))))
	}

	// Reclaim Delete: the claim goes, and the volume and its directory
	// with it.
	if err := cs.CoreV1().PersistentVolumeClaims("default").Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testup.WaitFor(t, ctx, time.Minute, "the Delete volume and its directory gone", func() (bool, string) {
		_, err := cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		_, statErr := os.Stat(dir)
		return apierrors.IsNotFound(err) && os.IsNotExist(statErr), "volume: " + errString(err) + "; directory: " + errString(statErr)
	})

	// Reclaim Retain: the claim goes, the volume is Released and the data
	// stays on the node.
	script("a claim of local-path-retain", `export KUBECONFIG=$PWD/.steadyplane/admin.kubeconfig
kubectl apply -f - <<'EOF'
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: kept}
spec: {storageClassName: local-path-retain, accessModes: [ReadWriteOncePod], resources: {requests: {storage: 10Mi}}}
EOF
kubectl run keeper --image=busybox:1.36 --restart=Never --overrides='{"spec":{
  "volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"kept"}}],"containers":[{"name":"keeper",
  "image":"busybox:1.36","command":["sh","-c","echo kept > /data/file"],"volumeMounts":[{"name":"data","mountPath":"/data"}]}]}}'
kubectl wait --for=jsonpath='{.status.phase}'=Succeeded pod/keeper --timeout=120s
kubectl delete pod keeper
kubectl delete pvc kept`)
	kept, err := cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var retained *corev1.PersistentVolume
	for i := range kept.Items {
		if kept.Items[i].Spec.StorageClassName == "local-path-retain" {
			retained = &kept.Items[i]
		}
	}
	if retained == nil || retained.Spec.Local == nil {
		t.Fatal("no local volume of local-path-retain")
	}
	testup.WaitFor(t, ctx, time.Minute, "the Retain volume Released", func() (bool, string) {
		pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, retained.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pv.Status.Phase == corev1.VolumeReleased, string(pv.Status.Phase)
	})
	if b, err := os.ReadFile(filepath.Join(retained.Spec.Local.Path, "file")); err != nil || string(b) != "kept\n" {
		t.Errorf("the retained volume's data: %q, %v; want kept", b, err)
	}
}

func errString(err error) string {
	if err == nil {
		return "there"
	}
	return err.Error()
}
