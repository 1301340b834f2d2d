package podworker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

// fakeSource holds ConfigMaps and Secrets by name.
type fakeSource struct {
	configMaps map[string]map[string]string
	secrets    map[string]map[string][]byte
}

func (f fakeSource) ConfigMap(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
	d, ok := f.configMaps[name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
	}
	return &corev1.ConfigMap{Data: d}, nil
}

func (f fakeSource) Secret(_ context.Context, _, name string) (*corev1.Secret, error) {
	d, ok := f.secrets[name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
	}
	return &corev1.Secret{Data: d}, nil
}

func (f fakeSource) PersistentVolumeClaim(_ context.Context, _, name string) (*corev1.PersistentVolumeClaim, error) {
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumeclaims"}, name)
}

func (f fakeSource) PersistentVolume(_ context.Context, name string) (*corev1.PersistentVolume, error) {
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumes"}, name)
}

func (f fakeSource) Token(context.Context, string, string, *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return nil, errors.New("no tokens here")
}

// TestEnvSources: every env and envFrom source, as the kubelet makes them
// (the conformance suite's ConfigMap, Secret, downward API and Indexed Job
// tests read these).
func TestEnvSources(t *testing.T) {
	src := fakeSource{
		configMaps: map[string]map[string]string{"app": {"MODE": "fast", "LEVEL": "3", "bad-name=": "x"}},
		secrets:    map[string]map[string][]byte{"db": {"PASSWORD": []byte("s3cret")}},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "job-0", Namespace: "ns", UID: "uid-1",
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"batch.kubernetes.io/job-completion-index": "0"}},
		Spec: corev1.PodSpec{NodeName: "n1", ServiceAccountName: "sa", Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}}}},
	}
	c := &pod.Spec.Containers[0]
	c.EnvFrom = []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}, Prefix: "APP_"},
		{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "missing"}, Optional: ptr.To(true)}},
	}
	field := func(p string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: p}}
	}
	c.Env = []corev1.EnvVar{
		{Name: "JOB_COMPLETION_INDEX", ValueFrom: field("metadata.annotations['batch.kubernetes.io/job-completion-index']")},
		{Name: "APP_LABEL", ValueFrom: field("metadata.labels['app']")},
		{Name: "POD_UID", ValueFrom: field("metadata.uid")},
		{Name: "POD_IPS", ValueFrom: field("status.podIPs")},
		{Name: "CPU_REQUEST", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}}},
		{Name: "MEMORY_LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}},
		{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "PASSWORD"}}},
		{Name: "OPTIONAL", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Key: "NOPE", Optional: ptr.To(true)}}},
		{Name: "DERIVED", Value: "$(APP_MODE)-$(JOB_COMPLETION_INDEX)-$$(APP_MODE)"},
	}
	in := envInputs{podIPs: []string{"10.244.0.5", "fd00::5"}, hostIP: "10.0.0.1", source: src,
		allocatable: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi"), corev1.ResourceCPU: resource.MustParse("2")}}
	env, _, err := containerEnv(context.Background(), pod, c, in)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{defaultPath, "HOSTNAME=job-0", "APP_LEVEL=3", "APP_MODE=fast", "JOB_COMPLETION_INDEX=0", "APP_LABEL=web", "POD_UID=uid-1",
		"POD_IPS=10.244.0.5,fd00::5", "CPU_REQUEST=250", "MEMORY_LIMIT=2147483648", "PASSWORD=s3cret", "DERIVED=fast-0-$(APP_MODE)"}
	if !slices.Equal(env, want) {
		t.Errorf("env\n got %q\nwant %q", env, want)
	}

	for name, bad := range map[string]corev1.EnvVar{
		"a missing ConfigMap":         {Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "none"}, Key: "k"}}},
		"a missing key of a Secret":   {Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "USER"}}},
		"a field that does not exist": {Name: "X", ValueFrom: field("spec.nothing")},
	} {
		c.Env = []corev1.EnvVar{bad}
		if _, _, err := containerEnv(context.Background(), pod, c, in); !errors.Is(err, errConfig) {
			t.Errorf("%s: %v, want a configuration error", name, err)
		}
	}
}

func TestWithSubPathExprs(t *testing.T) {
	env := []string{"POD_NAME=foo", "ANNOTATION=mypath", "EMPTY=", "UP=..", "ROOT=/etc"}
	for _, tc := range []struct {
		name, expr, want, err string
	}{
		{"variables expanded", "$(ANNOTATION)/$(POD_NAME)", "mypath/foo", ""},
		{"escaped", "$$(POD_NAME)", "$(POD_NAME)", ""},
		{"an unset variable", "$(NONE)/$(POD_NAME)", "", "missing value for NONE"},
		{"an empty one counts as missing", "$(EMPTY)/x", "", "missing value for EMPTY"},
		{"climbing out", "$(UP)/x", "", "must not contain '..'"},
		{"absolute", "$(ROOT)", "", "must be a relative path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "keep", SubPath: "plain"}, {Name: "v", SubPathExpr: tc.expr}}}
			got, err := withSubPathExprs(c, env)
			if tc.err != "" {
				if !errors.Is(err, errConfig) || !strings.Contains(fmt.Sprint(err), tc.err) {
					t.Fatalf("error %v, want a configuration error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.VolumeMounts[1].SubPath != tc.want || got.VolumeMounts[1].SubPathExpr != "" || got.VolumeMounts[0].SubPath != "plain" {
				t.Errorf("mounts %+v, want subPath %q", got.VolumeMounts, tc.want)
			}
			if c.VolumeMounts[1].SubPath != "" {
				t.Error("the container's own spec was changed")
			}
		})
	}
}

// TestServiceEnv: the kubelet's service links. Services of the pod's
// namespace with a cluster IP and the API server's give variables; the
// container's own override them and can expand them.
func TestServiceEnv(t *testing.T) {
	svc := func(ns, name, ip string, port int32) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Name: "http", Port: port, Protocol: corev1.ProtocolTCP}}}}
	}
	objs := []any{
		svc("default", "kubernetes", "10.96.0.1", 443),
		svc("app", "web-front", "10.96.0.20", 8080),
		svc("app", "headless", "None", 80),
		svc("other", "db", "10.96.0.30", 5432),
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "p"}}
	vars := ServiceEnvVars(pod, objs)
	for k, v := range map[string]string{
		"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
		"WEB_FRONT_SERVICE_HOST": "10.96.0.20", "WEB_FRONT_SERVICE_PORT_HTTP": "8080", "WEB_FRONT_PORT_8080_TCP_ADDR": "10.96.0.20",
	} {
		if vars[k] != v {
			t.Errorf("%s = %q, want %q", k, vars[k], v)
		}
	}
	for _, k := range []string{"HEADLESS_SERVICE_HOST", "DB_SERVICE_HOST"} {
		if _, ok := vars[k]; ok {
			t.Errorf("%s set: a headless service, or one of another namespace", k)
		}
	}
	pod.Spec.EnableServiceLinks = ptr.To(false)
	if vars := ServiceEnvVars(pod, objs); len(vars) == 0 || vars["KUBERNETES_SERVICE_HOST"] != "10.96.0.1" || vars["WEB_FRONT_SERVICE_HOST"] != "" {
		t.Errorf("enableServiceLinks: false: %v, want only the API server's", vars)
	}

	c := &corev1.Container{Env: []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_PORT", Value: "6443"}, {Name: "API", Value: "https://$(KUBERNETES_SERVICE_HOST)"}}}
	env, _, err := containerEnv(context.Background(), pod, c, envInputs{services: map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"KUBERNETES_SERVICE_PORT=6443", "API=https://10.96.0.1", "KUBERNETES_SERVICE_HOST=10.96.0.1"} {
		if !slices.Contains(env, want) {
			t.Errorf("env %v lacks %s", env, want)
		}
	}
	if slices.Contains(env, "KUBERNETES_SERVICE_PORT=443") {
		t.Error("a service variable overrode the container's own")
	}
}

// TestEnvFromRelaxedNames: envFrom keys become variables under any
// printable name, as Kubernetes has taken them since relaxed variable
// names (the conformance suite's "various prefixes" tests).
func TestEnvFromRelaxedNames(t *testing.T) {
	src := fakeSource{configMaps: map[string]map[string]string{"cm": {"data-1": "value-1"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	c := &corev1.Container{EnvFrom: []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}},
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}, Prefix: "1-"},
	}}
	env, _, err := containerEnv(context.Background(), pod, c, envInputs{source: src})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"data-1=value-1", "1-data-1=value-1"} {
		if !slices.Contains(env, want) {
			t.Errorf("env %q lacks %s", env, want)
		}
	}
}
