package volume

import (
	"context"
	"fmt"
	"os"
	"path"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/api/v1/resource"
	"k8s.io/kubernetes/pkg/volume/configmap"
	"k8s.io/kubernetes/pkg/volume/downwardapi"
	"k8s.io/kubernetes/pkg/volume/secret"
	volumeutil "k8s.io/kubernetes/pkg/volume/util"
)

// Volumes made of API objects (configMap, secret, downwardAPI, projected):
// their files as upstream's payload functions make them, written
// atomically, and the service-account tokens they carry.

// writeAPIVolume writes a volume made of API objects atomically into p.
func (v *Volumes) writeAPIVolume(ctx context.Context, vol corev1.Volume, p string, now time.Time) error {
	payload, renewAt, err := v.payload(ctx, vol, now)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		return err
	}
	w, err := volumeutil.NewAtomicWriter(p, "volume "+vol.Name)
	if err != nil {
		return err
	}
	// The whole volume, each time: a first write makes files outside the
	// timestamped directory too (as the kubelet's volumes do).
	setPerms := func(string) error { return v.setOwnership(p, true, false) }
	if err := w.Write(payload, setPerms); err != nil {
		return err
	}
	if !renewAt.IsZero() {
		v.renew[vol.Name] = renewAt
	}
	return nil
}

func mode(m *int32) *int32 {
	if m != nil {
		return m
	}
	d := corev1.ConfigMapVolumeSourceDefaultMode // 0644, the API's default for every kind
	return &d
}

func optional(b *bool) bool { return b != nil && *b }

// payload returns the files of vol, and when a token in it is due for renewal.
func (v *Volumes) payload(ctx context.Context, vol corev1.Volume, now time.Time) (map[string]volumeutil.FileProjection, time.Time, error) {
	ns := v.pod.Namespace
	switch s := vol.VolumeSource; {
	case s.ConfigMap != nil:
		cm, err := v.configMap(ctx, ns, s.ConfigMap.Name, optional(s.ConfigMap.Optional))
		if err != nil {
			return nil, time.Time{}, err
		}
		p, err := configmap.MakePayload(s.ConfigMap.Items, cm, mode(s.ConfigMap.DefaultMode), optional(s.ConfigMap.Optional))
		return p, time.Time{}, err
	case s.Secret != nil:
		sec, err := v.secret(ctx, ns, s.Secret.SecretName, optional(s.Secret.Optional))
		if err != nil {
			return nil, time.Time{}, err
		}
		p, err := secret.MakePayload(s.Secret.Items, sec, mode(s.Secret.DefaultMode), optional(s.Secret.Optional))
		return p, time.Time{}, err
	case s.DownwardAPI != nil:
		p, err := v.downward(s.DownwardAPI.Items, mode(s.DownwardAPI.DefaultMode))
		return p, time.Time{}, err
	case s.Projected != nil:
		return v.projected(ctx, s.Projected, now)
	}
	return nil, time.Time{}, fmt.Errorf("%w: no source", ErrUnsupported)
}

// configMap reads a volume's ConfigMap; an optional one that does not
// exist is empty.
func (v *Volumes) configMap(ctx context.Context, ns, name string, opt bool) (*corev1.ConfigMap, error) {
	cm, found, err := ConfigMapOf(ctx, v.src, ns, name, opt)
	switch {
	case err != nil:
		return nil, fmt.Errorf("configmap %q: %w", name, err)
	case !found:
		return &corev1.ConfigMap{}, nil
	}
	return cm, nil
}

// secret reads a volume's Secret; an optional one that does not exist is
// empty.
func (v *Volumes) secret(ctx context.Context, ns, name string, opt bool) (*corev1.Secret, error) {
	s, found, err := SecretOf(ctx, v.src, ns, name, opt)
	switch {
	case err != nil:
		return nil, fmt.Errorf("secret %q: %w", name, err)
	case !found:
		return &corev1.Secret{}, nil
	}
	return s, nil
}

// downward collects downward API files: object fields by upstream's
// CollectData, resource fields against the node's allocatable resources.
func (v *Volumes) downward(items []corev1.DownwardAPIVolumeFile, defaultMode *int32) (map[string]volumeutil.FileProjection, error) {
	var fields []corev1.DownwardAPIVolumeFile
	out := map[string]volumeutil.FileProjection{}
	for _, it := range items {
		if it.ResourceFieldRef == nil {
			fields = append(fields, it)
			continue
		}
		val, err := resource.ExtractResourceValueByContainerNameAndNodeAllocatable(it.ResourceFieldRef, v.pod, it.ResourceFieldRef.ContainerName, v.allocatable)
		if err != nil {
			return nil, err
		}
		m := *defaultMode
		if it.Mode != nil {
			m = *it.Mode
		}
		out[path.Clean(it.Path)] = volumeutil.FileProjection{Data: []byte(val), Mode: m}
	}
	got, err := downwardapi.CollectData(fields, v.pod, nil, defaultMode)
	if err != nil {
		return nil, err
	}
	for k, f := range got {
		out[k] = f
	}
	return out, nil
}

// projected merges its sources' files, as the kubelet's projected volume;
// a token is renewed at 80% of its lifetime.
func (v *Volumes) projected(ctx context.Context, s *corev1.ProjectedVolumeSource, now time.Time) (map[string]volumeutil.FileProjection, time.Time, error) {
	out := map[string]volumeutil.FileProjection{}
	var renewAt time.Time
	dm := mode(s.DefaultMode)
	for _, src := range s.Sources {
		var files map[string]volumeutil.FileProjection
		var err error
		switch {
		case src.ConfigMap != nil:
			var cm *corev1.ConfigMap
			if cm, err = v.configMap(ctx, v.pod.Namespace, src.ConfigMap.Name, optional(src.ConfigMap.Optional)); err == nil {
				files, err = configmap.MakePayload(src.ConfigMap.Items, cm, dm, optional(src.ConfigMap.Optional))
			}
		case src.Secret != nil:
			var sec *corev1.Secret
			if sec, err = v.secret(ctx, v.pod.Namespace, src.Secret.Name, optional(src.Secret.Optional)); err == nil {
				files, err = secret.MakePayload(src.Secret.Items, sec, dm, optional(src.Secret.Optional))
			}
		case src.DownwardAPI != nil:
			files, err = v.downward(src.DownwardAPI.Items, dm)
		case src.ServiceAccountToken != nil:
			var tok string
			var at time.Time
			tok, at, err = v.token(ctx, src.ServiceAccountToken, now)
			if err == nil {
				files = map[string]volumeutil.FileProjection{src.ServiceAccountToken.Path: {Data: []byte(tok), Mode: *dm}}
				if renewAt.IsZero() || at.Before(renewAt) {
					renewAt = at
				}
			}
		default:
			err = fmt.Errorf("%w: a projected source of a kind the node agent does not make", ErrUnsupported)
		}
		if err != nil {
			return nil, time.Time{}, err
		}
		for k, f := range files {
			out[k] = f
		}
	}
	return out, renewAt, nil
}

// token asks for a service-account token bound to the pod, and says when
// to renew it (80% of its lifetime, as the kubelet).
func (v *Volumes) token(ctx context.Context, s *corev1.ServiceAccountTokenProjection, now time.Time) (string, time.Time, error) {
	sa := v.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	exp := int64(3600)
	if s.ExpirationSeconds != nil {
		exp = *s.ExpirationSeconds
	}
	var aud []string
	if s.Audience != "" {
		aud = []string{s.Audience}
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: aud, ExpirationSeconds: &exp,
		BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: v.pod.Name, UID: v.pod.UID},
	}}
	got, err := v.src.Token(ctx, v.pod.Namespace, sa, req)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("service account %q token: %w", sa, err)
	}
	life := got.Status.ExpirationTimestamp.Sub(now)
	if life <= 0 {
		life = time.Duration(exp) * time.Second
	}
	return got.Status.Token, now.Add(life * 8 / 10), nil
}
