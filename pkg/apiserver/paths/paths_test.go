package paths

import "testing"

func TestIsHealthOrMetrics(t *testing.T) {
	tests := map[string]bool{
		"/readyz":                 true,
		"/readyz/etcd":            true,
		"/readyz/poststarthook/x": true,
		"/livez":                  true,
		"/livez/ping":             true,
		"/healthz":                true,
		"/healthz/log":            true,
		"/metrics":                true,
		"/metrics/slis":           true,
		"/readyzfoo":              false,
		"/metricsx":               false,
		"/api/v1/namespaces":      false,
		"/api/v1/healthz":         false,
		"/":                       false,
		"":                        false,
		"/version":                false,
		"/apis/readyz":            false,
	}
	for path, want := range tests {
		if got := IsHealthOrMetrics(path); got != want {
			t.Errorf("IsHealthOrMetrics(%q) = %v, want %v", path, got, want)
		}
	}
}
