package readinessgates

import (
	"slices"
	"testing"
)

// TestControllerTouchesOnlyItsWebhookConfiguration: every right the
// controller has on webhook configurations names its own, and it may
// create none (RBAC cannot hold a create to a name).
func TestControllerTouchesOnlyItsWebhookConfiguration(t *testing.T) {
	for _, r := range ClusterRole().Rules {
		if !slices.Contains(r.Resources, "mutatingwebhookconfigurations") && !slices.Contains(r.Resources, "validatingwebhookconfigurations") {
			continue
		}
		if len(r.ResourceNames) == 0 || slices.Contains(r.Verbs, "create") || slices.Contains(r.Verbs, "*") {
			t.Errorf("rule %+v: the controller may touch webhook configurations other than its own", r)
		}
	}
}
