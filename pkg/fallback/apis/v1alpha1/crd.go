package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CRD is the CustomResourceDefinition of KubeAPIServer: cluster-scoped, a
// status subresource, and the revision and conditions as printer columns.
func CRD() *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	strs := apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &str}}
	i32 := apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int32"}
	names := apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "string", MaxLength: ptr(int64(200)), Pattern: `^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`}}}
	condition := apiextensionsv1.JSONSchemaProps{Type: "object", Required: []string{"type", "status", "lastTransitionTime", "reason", "message"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"type": str, "status": {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"True"`)}, {Raw: []byte(`"False"`)}, {Raw: []byte(`"Unknown"`)}}},
			"observedGeneration": {Type: "integer", Format: "int64"}, "lastTransitionTime": {Type: "string", Format: "date-time"},
			"reason": str, "message": str,
		}}
	nodeStatus := apiextensionsv1.JSONSchemaProps{Type: "object", Required: []string{"nodeName"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"nodeName": str, "currentRevision": i32, "targetRevision": i32, "lastFailedRevision": i32, "lastFailedReason": str,
		"lastFailedTime": {Type: "string", Format: "date-time"}, "lastFallbackCount": i32, "lastFailedRevisionErrors": strs,
	}}
	release := apiextensionsv1.JSONSchemaProps{Type: "object", Required: []string{"version", "digest"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"version": str, "digest": {Type: "string", Pattern: `^sha256:[0-9a-f]{64}$`},
	}}
	nodeRelease := apiextensionsv1.JSONSchemaProps{Type: "object", Required: []string{"nodeName"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"nodeName": str, "server": {Type: "boolean"}, "release": str, "target": str, "failed": str, "reason": str, "message": str,
		"asked": {Type: "string", Format: "date-time"}, "moved": {Type: "string", Format: "date-time"},
	}}
	schema := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"apiVersion": str, "kind": str, "metadata": {Type: "object"},
		"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"extraArgs": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", Pattern: `^--`}},
				Description: "Appended to the API server's arguments, each --flag or --flag=value."},
			"configMaps": withDescription(names, "ConfigMaps in steadyplane-system, mounted at /etc/kubernetes/static-pod-resources/configmaps/<name>/<key>."),
			"secrets":    withDescription(names, "Secrets in steadyplane-system, mounted at /etc/kubernetes/static-pod-resources/secrets/<name>/<key> (0600)."),
			"release":    withDescription(release, "The steadyplane release the operator rolls over the servers, one at a time, then the workers (steadyplane upgrade sets it)."),
		}},
		"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"latestAvailableRevision": i32,
			"nodeStatuses":            {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &nodeStatus}},
			"conditions":              {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &condition}},
			"release": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"version": str, "digest": str, "startTime": {Type: "string", Format: "date-time"}, "completionTime": {Type: "string", Format: "date-time"},
				"nodes":      {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &nodeRelease}},
				"conditions": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &condition}},
			}},
		}},
	}}
	column := func(name, path string) apiextensionsv1.CustomResourceColumnDefinition {
		return apiextensionsv1.CustomResourceColumnDefinition{Name: name, Type: "string", JSONPath: path}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: Resource + "." + Group, Labels: map[string]string{"app.kubernetes.io/managed-by": "steadyplane"}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: Group, Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: Resource, Singular: "kubeapiserver", Kind: Kind, ListKind: Kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: Version, Served: true, Storage: true,
				Schema:       &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &schema},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Revision", Type: "integer", JSONPath: ".status.latestAvailableRevision"},
					column("Available", `.status.conditions[?(@.type=="Available")].status`),
					column("Progressing", `.status.conditions[?(@.type=="Progressing")].status`),
					column("Degraded", `.status.conditions[?(@.type=="Degraded")].status`),
					column("Reason", `.status.conditions[?(@.type=="Degraded")].reason`),
					column("Release", `.status.release.version`),
					column("Rolled", `.status.release.conditions[?(@.type=="Progressing")].reason`),
				},
			}},
		},
	}
}

func withDescription(p apiextensionsv1.JSONSchemaProps, d string) apiextensionsv1.JSONSchemaProps {
	p.Description = d
	return p
}

func ptr[T any](v T) *T { return &v }
