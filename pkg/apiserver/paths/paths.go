// Package paths classifies API server request paths for steadyplane's
// filters, which all leave health and metrics endpoints alone.
package paths

import "strings"

// healthAndMetricsPrefixes are the endpoints probes and scrapers use: they
// must see the server's own state, never a filter's answer or additions.
var healthAndMetricsPrefixes = []string{"/readyz", "/livez", "/healthz", "/metrics"}

// IsHealthOrMetrics reports whether path is a health or metrics endpoint (the
// path itself or anything below it).
func IsHealthOrMetrics(path string) bool {
	for _, p := range healthAndMetricsPrefixes {
		if strings.HasPrefix(path, p) && (len(path) == len(p) || path[len(p)] == '/') {
			return true
		}
	}
	return false
}
