package localpath

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	"github.com/steadyplane/steadyplane/pkg/node/kubeletapi"
	"github.com/steadyplane/steadyplane/pkg/rbacutil"
)

// ProvisionerName is the provisioner of the StorageClasses this package
// serves.
const ProvisionerName = "steadyplane.io/local-path"

// The StorageClasses up makes: the cluster's default, whose volumes go
// with their claims, and one whose volumes stay (reclaim Retain) until an
// administrator deletes them.
const (
	DefaultClassName = "local-path"
	RetainClassName  = "local-path-retain"
)

// defaultClassAnnotation makes a StorageClass the one claims without a
// class get.
const defaultClassAnnotation = "storageclass.kubernetes.io/is-default-class"

// StorageClasses are the classes up makes (once: a user may change which
// is the default).
func StorageClasses() []*storagev1.StorageClass {
	class := func(name string, reclaim corev1.PersistentVolumeReclaimPolicy, annotations map[string]string) *storagev1.StorageClass {
		return &storagev1.StorageClass{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: rbacutil.ManagedBy, Annotations: annotations},
			Provisioner: ProvisionerName, ReclaimPolicy: ptr.To(reclaim),
			// The volume is on one node: the claim waits for its first
			// pod's node, so that the pod can run where its data is.
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		}
	}
	return []*storagev1.StorageClass{
		class(DefaultClassName, corev1.PersistentVolumeReclaimDelete, map[string]string{defaultClassAnnotation: "true"}),
		class(RetainClassName, corev1.PersistentVolumeReclaimRetain, nil),
	}
}

// EnsureStorageClasses makes the classes that are not there, with a
// client that may (the cluster's admin); one that is there is left as
// it is: a class is mostly immutable, and which is the default is the
// administrator's to change.
func EnsureStorageClasses(ctx context.Context, client kubernetes.Interface) error {
	for _, c := range StorageClasses() {
		_, err := client.StorageV1().StorageClasses().Create(ctx, c, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("storageclass %s: %w", c.Name, err)
		}
	}
	return nil
}

// Check says why a claim cannot have a local volume: a selector (no
// existing volume is ever chosen), an access mode other than a single
// node's, or no node chosen yet.
func Check(o controller.ProvisionOptions) error {
	if o.PVC.Spec.Selector != nil {
		return errors.New("claim has a selector: local-path provisions new volumes only")
	}
	for _, m := range o.PVC.Spec.AccessModes {
		if m != corev1.ReadWriteOnce && m != corev1.ReadWriteOncePod {
			return fmt.Errorf("access mode %s: a local volume is on one node, so only ReadWriteOnce and ReadWriteOncePod", m)
		}
	}
	if o.SelectedNodeName == "" {
		return fmt.Errorf("no node chosen for the claim: StorageClass %s must have volumeBindingMode WaitForFirstConsumer", o.StorageClass.Name)
	}
	return nil
}

// PersistentVolume is the volume a claim gets: the directory v on node,
// of the claim's requested size (nothing enforces it: the node's
// filesystem is shared), reclaimed as its class says, and only on node.
func PersistentVolume(o controller.ProvisionOptions, node string, v Volume) *corev1.PersistentVolume {
	reclaim := corev1.PersistentVolumeReclaimDelete
	if o.StorageClass.ReclaimPolicy != nil {
		reclaim = *o.StorageClass.ReclaimPolicy
	}
	modes := o.PVC.Spec.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: o.PVName, Labels: rbacutil.ManagedBy},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: reclaim,
			AccessModes:                   modes,
			MountOptions:                  o.StorageClass.MountOptions,
			VolumeMode:                    ptr.To(corev1.PersistentVolumeFilesystem),
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: o.PVC.Spec.Resources.Requests[corev1.ResourceStorage]},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: v.Path}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
}

// NodeOf is the node a local volume is on, from its node affinity; ""
// when it names none.
func NodeOf(pv *corev1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return ""
	}
	for _, t := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 {
				return e.Values[0]
			}
		}
	}
	return ""
}

// Provisioner is the controller side: it asks nodes for directories over
// their node API.
type Provisioner struct {
	// Node reads a Node (its address and node API port).
	Node func(ctx context.Context, name string) (*corev1.Node, error)
	// HTTP reaches nodes' APIs: the add-on controllers' client
	// certificate, and the nodes' serving CA.
	HTTP *http.Client
}

var _ controller.Provisioner = (*Provisioner)(nil)

// Provision implements controller.Provisioner.
func (p *Provisioner) Provision(ctx context.Context, o controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	if err := Check(o); err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	v, err := p.call(ctx, http.MethodPost, o.SelectedNodeName, o.PVName)
	if err != nil {
		// Nothing is made when the node cannot be reached; a directory
		// made by a call that failed on its way back is made again (and
		// found) by the retry.
		return nil, controller.ProvisioningNoChange, err
	}
	want := o.PVC.Spec.Resources.Requests[corev1.ResourceStorage]
	if want.Value() > v.AvailableBytes {
		// Another node may have the room: the scheduler chooses again.
		if err := p.remove(ctx, o.SelectedNodeName, o.PVName); err != nil {
			klog.ErrorS(err, "Local volume: removing the directory of a claim that does not fit", "pv", o.PVName, "node", o.SelectedNodeName)
		}
		return nil, controller.ProvisioningReschedule, fmt.Errorf("node %s has %s free, the claim asks for %s",
			o.SelectedNodeName, resource.NewQuantity(v.AvailableBytes, resource.BinarySI), want.String())
	}
	klog.InfoS("Local volume provisioned", "pv", o.PVName, "claim", o.PVC.Namespace+"/"+o.PVC.Name, "node", o.SelectedNodeName, "path", v.Path)
	return PersistentVolume(o, o.SelectedNodeName, v), controller.ProvisioningFinished, nil
}

// Delete implements controller.Provisioner: the node removes the
// directory. A node that is gone from the cluster cannot, and its data is
// left where it was (as local-path does): the volume goes.
func (p *Provisioner) Delete(ctx context.Context, pv *corev1.PersistentVolume) error {
	node := NodeOf(pv)
	if node == "" || pv.Spec.Local == nil {
		return &controller.IgnoredError{Reason: "not a local volume on one node"}
	}
	err := p.remove(ctx, node, pv.Name)
	if apierrors.IsNotFound(err) {
		klog.InfoS("Local volume's node is gone; its directory stays there", "pv", pv.Name, "node", node, "path", pv.Spec.Local.Path)
		return nil
	}
	if err == nil {
		klog.InfoS("Local volume deleted", "pv", pv.Name, "node", node, "path", pv.Spec.Local.Path)
	}
	return err
}

func (p *Provisioner) remove(ctx context.Context, node, pv string) error {
	_, err := p.call(ctx, http.MethodDelete, node, pv)
	return err
}

// call sends method for volume pv to node's API; a Node that does not
// exist is the API's NotFound.
func (p *Provisioner) call(ctx context.Context, method, nodeName, pv string) (Volume, error) {
	n, err := p.Node(ctx, nodeName)
	if err != nil {
		return Volume{}, err
	}
	addr := kubeletapi.NodeAddress(n)
	if addr == "" {
		return Volume{}, fmt.Errorf("node %s publishes no InternalIP and node API port", nodeName)
	}
	req, err := http.NewRequestWithContext(ctx, method, "https://"+addr+kubeletapi.LocalVolumesPath+pv, nil)
	if err != nil {
		return Volume{}, err
	}
	resp, err := p.HTTP.Do(req)
	if err != nil {
		return Volume{}, fmt.Errorf("node %s: %w", nodeName, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return Volume{}, fmt.Errorf("node %s: %s %s: %s: %s", nodeName, method, kubeletapi.LocalVolumesPath+pv, resp.Status, strings.TrimSpace(string(body)))
	}
	var v Volume
	if method == http.MethodPost {
		if err := json.Unmarshal(body, &v); err != nil {
			return Volume{}, fmt.Errorf("node %s: %w", nodeName, err)
		}
	}
	return v, nil
}
