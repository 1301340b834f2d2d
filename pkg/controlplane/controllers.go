package controlplane

import (
	"context"
	"crypto/x509"
	"net"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// ControllerManager is what differs between the controller managers of a
// control plane.
type ControllerManager struct {
	// Kubeconfig has the system:kube-controller-manager credentials.
	Kubeconfig string
	// Port is the secure port on 127.0.0.1 (upstream's 10257).
	Port int
	// ClusterCIDR is the range node pod CIDRs are allocated from; each node
	// gets a range of NodeCIDRMaskSize bits.
	ClusterCIDR      string
	NodeCIDRMaskSize int
	ServiceCIDR      string
	// Serving is its serving certificate, from the cluster CA and renewed
	// while it runs (it reads the files again).
	Serving *pki.KeyPair
	// SigningDuration is how long the certificates it signs are valid:
	// the workers' client and serving certificates (--cert-validity).
	SigningDuration time.Duration
}

// ControllerManagerArgs returns the arguments of "steadyplane
// controller-manager": leader election, a service-account credential per
// controller, service-account tokens signed with the cluster's key, CSRs
// signed by the cluster CA, and node pod CIDRs allocated from ClusterCIDR.
func ControllerManagerArgs(p *pki.Cluster, c ControllerManager) []string {
	return []string{
		"controller-manager",
		"--kubeconfig=" + c.Kubeconfig,
		"--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.Port),
		"--tls-cert-file=" + c.Serving.CertPath,
		"--tls-private-key-file=" + c.Serving.KeyPath,
		"--cluster-signing-duration=" + c.SigningDuration.String(),
		"--leader-elect=true",
		// Stopped by "up", it hands its lease back: the next one leads at
		// once instead of after the lease expires (15s).
		"--feature-gates=ControllerManagerReleaseLeaderElectionLockOnExit=true",
		"--use-service-account-credentials=true",
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--service-account-private-key-file=" + p.ServiceAccountKey,
		"--root-ca-file=" + p.CA.CertPath,
		// Node serving certificates from a CA of their own (the names in
		// them are the nodes' choice), every other signer the cluster CA.
		"--cluster-signing-kubelet-serving-cert-file=" + p.KubeletCA.CertPath,
		"--cluster-signing-kubelet-serving-key-file=" + p.KubeletCA.KeyPath,
		"--cluster-signing-kubelet-client-cert-file=" + p.CA.CertPath,
		"--cluster-signing-kubelet-client-key-file=" + p.CA.KeyPath,
		"--cluster-signing-kube-apiserver-client-cert-file=" + p.CA.CertPath,
		"--cluster-signing-kube-apiserver-client-key-file=" + p.CA.KeyPath,
		"--cluster-signing-legacy-unknown-cert-file=" + p.CA.CertPath,
		"--cluster-signing-legacy-unknown-key-file=" + p.CA.KeyPath,
		"--allocate-node-cidrs=true",
		"--cluster-cidr=" + c.ClusterCIDR,
		"--node-cidr-mask-size=" + strconv.Itoa(c.NodeCIDRMaskSize),
		"--service-cluster-ip-range=" + c.ServiceCIDR,
	}
}

// Scheduler is what differs between the schedulers of a control plane.
type Scheduler struct {
	// Kubeconfig has the system:kube-scheduler credentials.
	Kubeconfig string
	// Port is the secure port on 127.0.0.1 (upstream's 10259).
	Port int
	// Serving is its serving certificate (ControllerManager's).
	Serving *pki.KeyPair
}

// SchedulerArgs returns the arguments of "steadyplane scheduler", with
// leader election.
func SchedulerArgs(s Scheduler) []string {
	return []string{
		"scheduler",
		"--kubeconfig=" + s.Kubeconfig,
		"--authentication-kubeconfig=" + s.Kubeconfig,
		"--authorization-kubeconfig=" + s.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.Port),
		"--tls-cert-file=" + s.Serving.CertPath,
		"--tls-private-key-file=" + s.Serving.KeyPath,
		"--leader-elect=true",
	}
}

// prepareControllers issues the controller manager's and the scheduler's
// client certificates, as the users upstream's bootstrap RBAC binds
// (system:kube-controller-manager, system:kube-scheduler), their
// kubeconfigs, and their processes.
func (cp *ControlPlane) prepareControllers() error {
	if !cp.opts.Controllers {
		return nil
	}
	cm, err := cp.componentKubeconfig("controller-manager", "system:kube-controller-manager")
	if err != nil {
		return err
	}
	sched, err := cp.componentKubeconfig("scheduler", "system:kube-scheduler")
	if err != nil {
		return err
	}
	// Serving certificates from the cluster CA rather than the
	// self-signed ones each makes for itself, which nothing renews.
	serving := map[string]*pki.KeyPair{}
	for _, name := range []string{"controller-manager", "scheduler"} {
		if serving[name], err = cp.issue(cp.dir.credentials(name), cp.pki.CA, pki.CertSpec{
			Name: name + "-serving", CommonName: name, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		}); err != nil {
			return err
		}
	}
	// Each node's pod range is allocated from the cluster's; the first
	// server's node agent is given the first range before that.
	cp.ControllerManager = &Process{Name: "controller-manager", Binary: cp.opts.Binary, LogPath: cp.dir.log("controller-manager"),
		Args: ControllerManagerArgs(cp.pki, ControllerManager{Kubeconfig: cm, Port: cp.opts.ControllerManagerPort, ClusterCIDR: cp.opts.ClusterCIDR,
			NodeCIDRMaskSize: cp.opts.NodeCIDRMaskSize, ServiceCIDR: cp.opts.ServiceCIDR, Serving: serving["controller-manager"], SigningDuration: cp.opts.CertValidity})}
	cp.Scheduler = &Process{Name: "scheduler", Binary: cp.opts.Binary, LogPath: cp.dir.log("scheduler"),
		Args: SchedulerArgs(Scheduler{Kubeconfig: sched, Port: cp.opts.SchedulerPort, Serving: serving["scheduler"]})}
	return nil
}

// controllerManagerPod is the controller manager's static pod: the PKI
// (its signers' keys) and its credentials (kubeconfig, client and serving
// certificates).
func (cp *ControlPlane) controllerManagerPod(binary string) staticpod.Spec {
	return staticpod.Spec{Name: controllerManagerComponent, Binary: binary, Args: cp.ControllerManager.Args,
		HostPaths: []staticpod.HostPath{cp.pkiPath(), cp.credentialsPath("controller-manager")},
		Liveness:  &staticpod.HTTPSCheck{Port: cp.opts.ControllerManagerPort, Path: "/healthz"}}
}

// schedulerPod is the scheduler's static pod: its credentials alone.
func (cp *ControlPlane) schedulerPod(binary string) staticpod.Spec {
	return staticpod.Spec{Name: schedulerComponent, Binary: binary, Args: cp.Scheduler.Args,
		HostPaths: []staticpod.HostPath{cp.credentialsPath("scheduler")},
		Liveness:  &staticpod.HTTPSCheck{Port: cp.opts.SchedulerPort, Path: "/healthz"}}
}

// componentKubeconfig issues a client certificate for user (from the
// cluster CA) in credentials/<name>/ and writes the kubeconfig there
// (0600), naming the certificate's files: the component reads a renewal
// without a restart.
func (cp *ControlPlane) componentKubeconfig(name, user string, groups ...string) (string, error) {
	return cp.writeComponentKubeconfig(clientconfig.WriteFileKubeconfig, name, user, groups...)
}

// writeComponentKubeconfig issues the client certificate, kept renewed
// while up runs, and writes the kubeconfig with write.
func (cp *ControlPlane) writeComponentKubeconfig(write func(path, server, user string, ca *pki.Authority, kp *pki.KeyPair, alternatives []string) error, name, user string, groups ...string) (string, error) {
	kp, err := cp.issue(cp.dir.credentials(name), cp.pki.CA, pki.CertSpec{
		Name: name, CommonName: user, Organization: groups, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return "", err
	}
	path := cp.dir.kubeconfig(name)
	if err := write(path, cp.APIServerURL(), user, cp.pki.CA, kp, cp.alternatives()); err != nil {
		return "", err
	}
	return path, cp.migrateLegacyCredentials(name, kp)
}

// StartControllers starts the controller manager and the scheduler and
// waits until each leads, reporting both.
func (cp *ControlPlane) StartControllers(ctx context.Context) error {
	return cp.startStage(ctx, stage{start: []string{controllerManagerComponent, schedulerComponent}, ready: []string{controllerManagerComponent, schedulerComponent}})
}

// waitControllerManagerReady waits until the controller manager holds its
// leader lease and has made the default namespace's service account (pods
// are refused until it exists).
func (cp *ControlPlane) waitControllerManagerReady(ctx context.Context) error {
	if err := cp.waitLeader(ctx, controllerManagerComponent); err != nil {
		return err
	}
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	return cp.waitFor(ctx, controllerManagerComponent, readyPoll, func(ctx context.Context) (bool, string) {
		if _, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// waitSchedulerReady waits until the scheduler holds its leader lease.
func (cp *ControlPlane) waitSchedulerReady(ctx context.Context) error {
	return cp.waitLeader(ctx, schedulerComponent)
}

// waitLeader waits until the component's lease kube-system/name is held
// and renewed after the wait began: a leader that was killed stops
// renewing, so after a restart this waits for the new process to take over.
func (cp *ControlPlane) waitLeader(ctx context.Context, name string) error {
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	started := time.Now()
	return cp.waitFor(ctx, name, readyPoll, func(ctx context.Context) (bool, string) {
		l, err := client.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil || !l.Spec.RenewTime.Time.After(started) {
			return false, "no leader yet"
		}
		return true, ""
	})
}
