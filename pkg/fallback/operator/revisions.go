package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/yaml"

	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
)

// RevisionSelector selects the operand's revision ConfigMaps (and their
// renderings and copies, which carry the same labels).
func RevisionSelector() labels.Selector {
	r, _ := labels.NewRequirement(RevisionLabel, selection.Exists, nil)
	c, _ := labels.NewRequirement("component", selection.Equals, []string{Operand})
	return labels.NewSelector().Add(*r, *c)
}

// revisionLabels are the labels of revision n's objects: what prune
// deletes them by.
func revisionLabels(n int32) map[string]string {
	return map[string]string{RevisionLabel: strconv.Itoa(int(n)), "component": Operand, "app.kubernetes.io/managed-by": "steadyplane"}
}

// revisionOf is the number of the revision whose ConfigMap cm is; false for
// its copies of the user's ConfigMaps, which carry the label too.
func revisionOf(cm *corev1.ConfigMap) (int32, bool) {
	n := atoi32(cm.Labels[RevisionLabel])
	return n, n > 0 && cm.Name == RevisionName(Operand, n)
}

// Latest is the newest revision among cms (nil for none): renderings and
// copies are not revisions.
func Latest(cms []corev1.ConfigMap) *corev1.ConfigMap {
	var latest *corev1.ConfigMap
	var n int32
	for i := range cms {
		if r, ok := revisionOf(&cms[i]); ok && r > n {
			n, latest = r, &cms[i]
		}
	}
	return latest
}

// Find is revision n among cms (nil when it is not there).
func Find(cms []corev1.ConfigMap, n int32) *corev1.ConfigMap {
	for i := range cms {
		if r, ok := revisionOf(&cms[i]); ok && r == n {
			return &cms[i]
		}
	}
	return nil
}

// latestRevision returns the newest revision in the API and its input hash.
func (o *Operator) latestRevision() (int32, string, error) {
	cms, err := o.cmLister.List(RevisionSelector())
	if err != nil {
		return 0, "", err
	}
	var n int32
	hash := ""
	for _, cm := range cms {
		if r, ok := revisionOf(cm); ok && r > n {
			n, hash = r, cm.Annotations[InputHashAnnotation]
		}
	}
	return n, hash, nil
}

// createRevision makes revision n: copies of the user's ConfigMaps and
// Secrets, then the revision ConfigMap (last: its existence means the
// revision is whole), all immutable. created is false when the revision
// ConfigMap existed already.
func (o *Operator) createRevision(ctx context.Context, n int32, in Inputs, cause string) (created bool, err error) {
	objMeta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: v1alpha1.Namespace, Labels: revisionLabels(n)}
	}
	immutable := true
	for _, name := range slices.Sorted(maps.Keys(in.ConfigMaps)) {
		cm := &corev1.ConfigMap{ObjectMeta: objMeta(CopyName(name, n)), Data: in.ConfigMaps[name], BinaryData: in.ConfigMapsBinary[name], Immutable: &immutable}
		if _, err := o.Client.CoreV1().ConfigMaps(v1alpha1.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(in.Secrets)) {
		s := &corev1.Secret{ObjectMeta: objMeta(CopyName(name, n)), Data: in.Secrets[name], Immutable: &immutable}
		if _, err := o.Client.CoreV1().Secrets(v1alpha1.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err
		}
	}
	_, err = o.Client.CoreV1().ConfigMaps(v1alpha1.Namespace).Create(ctx, RevisionConfigMap(in, n, cause), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return false, nil
	}
	return err == nil, err
}

// RevisionConfigMap is revision n's ConfigMap: the spec, the input hash,
// the names of the copied objects and the cause. "up" makes the bootstrap
// revision with it too, so that the operator finds it whole.
func RevisionConfigMap(in Inputs, n int32, cause string) *corev1.ConfigMap {
	spec, _ := json.Marshal(in.Spec) // strings and lists of strings
	cms, _ := json.Marshal(slices.Sorted(maps.Keys(in.ConfigMaps)))
	secrets, _ := json.Marshal(slices.Sorted(maps.Keys(in.Secrets)))
	immutable := true
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: RevisionName(Operand, n), Namespace: v1alpha1.Namespace,
			Labels:      revisionLabels(n),
			Annotations: map[string]string{InputHashAnnotation: in.Hash(), ConfigMapsAnnotation: string(cms), SecretsAnnotation: string(secrets), CauseAnnotation: cause}},
		Data:      map[string]string{RevisionSpecKey: string(spec)},
		Immutable: &immutable,
	}
}

// Render is revision rev's rendering for node, from the node's templates:
// both manifests, labelled with the revision and the node, and annotated
// with the templates' hash.
func Render(rev *corev1.ConfigMap, templates map[string]string, node string) (*corev1.ConfigMap, error) {
	n, ok := revisionOf(rev)
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s is not a revision", rev.Name)
	}
	var spec v1alpha1.KubeAPIServerSpec
	raw, ok := rev.Data[RevisionSpecKey]
	if !ok {
		return nil, fmt.Errorf("revision %d has no %s (made by an older steadyplane): a new revision is needed", n, RevisionSpecKey)
	}
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return nil, fmt.Errorf("revision %d: %s: %w", n, RevisionSpecKey, err)
	}
	t, err := ParseTemplates(templates)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	operand, err := RenderOperand(t, spec, n)
	if err != nil {
		return nil, err
	}
	operandYAML, err := yaml.Marshal(operand)
	if err != nil {
		return nil, err
	}
	monitorYAML, err := yaml.Marshal(RenderMonitor(t, n))
	if err != nil {
		return nil, err
	}
	labels := revisionLabels(n)
	labels[NodeLabel] = node
	immutable := true
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: RenderingName(Operand, n, node), Namespace: v1alpha1.Namespace, Labels: labels,
			Annotations: map[string]string{TemplatesHashAnnotation: TemplatesHash(templates)}},
		Data:      map[string]string{RevisionOperandKey: string(operandYAML), RevisionMonitorKey: string(monitorYAML)},
		Immutable: &immutable,
	}, nil
}

// ensureRendering makes revision n's rendering for node from the node's
// templates, unless it exists.
func (o *Operator) ensureRendering(ctx context.Context, n int32, node string) error {
	if _, err := o.cmLister.Get(RenderingName(Operand, n, node)); err == nil {
		return nil
	}
	rev, err := o.cmLister.Get(RevisionName(Operand, n))
	if apierrors.IsNotFound(err) {
		// Made in this sync: the informer has not seen it yet.
		rev, err = o.Client.CoreV1().ConfigMaps(v1alpha1.Namespace).Get(ctx, RevisionName(Operand, n), metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	tmpl, err := o.cmLister.Get(TemplatesName(node))
	if err != nil {
		return fmt.Errorf("node %s has no templates (ConfigMap %s/%s, written by steadyplane up on it): %w", node, v1alpha1.Namespace, TemplatesName(node), err)
	}
	cm, err := Render(rev, tmpl.Data, node)
	if err != nil {
		return err
	}
	if _, err := o.Client.CoreV1().ConfigMaps(v1alpha1.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// startInstaller creates the installer pod of revision n on node, from the
// node's template.
func (o *Operator) startInstaller(ctx context.Context, node string, n, lastFailed int32, withMonitor bool) error {
	tmpl, err := o.cmLister.Get(TemplatesName(node))
	if err != nil {
		return err
	}
	t, err := ParseTemplates(tmpl.Data)
	if err != nil {
		return err
	}
	pod := RenderInstaller(t, node, n, lastFailed, withMonitor)
	_, err = o.Client.CoreV1().Pods(v1alpha1.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// staleTemplates are the nodes whose templates changed since the latest
// revision was rendered for them (StaleTemplates).
func (o *Operator) staleTemplates(latest int32) ([]string, error) {
	if latest == 0 {
		return nil, nil
	}
	sel := labels.SelectorFromSet(labels.Set{RevisionLabel: strconv.Itoa(int(latest)), "component": Operand})
	cms, err := o.cmLister.List(sel)
	if err != nil {
		return nil, err
	}
	rendered := map[string]string{}
	for _, cm := range cms {
		if node := cm.Labels[NodeLabel]; node != "" && cm.Name == RenderingName(Operand, latest, node) {
			rendered[node] = cm.Annotations[TemplatesHashAnnotation]
		}
	}
	now := map[string]string{}
	for node := range rendered {
		if tmpl, err := o.cmLister.Get(TemplatesName(node)); err == nil {
			now[node] = TemplatesHash(tmpl.Data)
		}
	}
	return StaleTemplates(now, rendered), nil
}

// prune deletes revisions no node uses beyond the newest Keep, with their
// copies, and installer pods that finished.
func (o *Operator) prune(ctx context.Context, st *v1alpha1.KubeAPIServerStatus) error {
	if o.Keep < 1 {
		return nil
	}
	cms, err := o.cmLister.List(RevisionSelector())
	if err != nil {
		return err
	}
	var all []int
	for _, cm := range cms {
		if n, ok := revisionOf(cm); ok {
			all = append(all, int(n))
		}
	}
	for _, n := range Prunable(all, o.Keep, *st) {
		sel := labels.SelectorFromSet(labels.Set{RevisionLabel: strconv.Itoa(n), "component": Operand})
		for _, del := range []func() error{
			func() error {
				return o.Client.CoreV1().ConfigMaps(v1alpha1.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel.String()})
			},
			func() error {
				return o.Client.CoreV1().Secrets(v1alpha1.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel.String()})
			},
		} {
			if err := del(); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		o.Log.Info("pruned revision", "revision", n)
	}
	pods, err := o.installers.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded && atoi32(p.Labels[RevisionLabel]) < st.LatestAvailableRevision {
			if err := o.Client.CoreV1().Pods(v1alpha1.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	return nil
}

func atoi32(s string) int32 {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0
	}
	return int32(n)
}
