package e2e

import (
	"strings"
	"testing"

	"github.com/steadyplane/steadyplane/internal/testup"
)

// TestParseThreeServers checks that the README's three-server walkthrough
// is one TestThreeServersNoLoadBalancer runs as written, and that blocks it
// could not run so are refused rather than half run.
func TestParseThreeServers(t *testing.T) {
	readme := testup.ReadmeBlock(t, "Three servers, no load balancer")
	w, err := parseThreeServers(readme)
	if err != nil {
		t.Fatalf("the README's block: %v", err)
	}
	if w.removeNode.name != "s3" || w.reset.host != 1 || !strings.HasPrefix(w.reset.then, "steadyplane up ") || w.worker.host != 3 {
		t.Errorf("the README's block read as %+v", w)
	}
	const good = `steadyplane up --bind-address 10.0.0.1
steadyplane up --bind-address 10.0.0.2 --server https://10.0.0.1:6443 --token-file token
steadyplane up --bind-address 10.0.0.3 --server https://10.0.0.1:6443 --token-file token
steadyplane node --server https://10.0.0.1:6443 --token-file node-token --node-ip 10.0.0.4
steadyplane kubectl get nodes
steadyplane remove-node s3
steadyplane up --bind-address 10.0.0.2 --cluster-reset && steadyplane up --bind-address 10.0.0.2
`
	if _, err := parseThreeServers(good); err != nil {
		t.Fatalf("a good block: %v", err)
	}
	for _, tc := range []struct{ name, from, to, want string }{
		{"a variable", "--token-file token\n", "--token-file $TOKEN\n", "shell syntax"},
		{"a pipe", "get nodes", "get nodes | grep Ready", "shell syntax"},
		{"a chain", "remove-node s3", "remove-node s3 && steadyplane up", "only the cluster reset"},
		{"a background job", "remove-node s3", "remove-node s3 &", "only the cluster reset"},
		{"no worker", "steadyplane node --server https://10.0.0.1:6443 --token-file node-token --node-ip 10.0.0.4\n", "", "steps missing"},
		{"a fifth host", "--node-ip 10.0.0.4", "--node-ip 10.0.0.5", "hosts 1 to 4"},
		{"the first server elsewhere", "--bind-address 10.0.0.1\n", "--bind-address 10.0.0.4\n", "not on 10.0.0.1"},
		{"a reset on the first server", "10.0.0.2 --cluster-reset && steadyplane up --bind-address 10.0.0.2", "10.0.0.1 --cluster-reset && steadyplane up --bind-address 10.0.0.1", "not on a joined server"},
		{"a reset not followed by up", " && steadyplane up --bind-address 10.0.0.2", "", "followed by && up"},
		{"a server on a fifth host", "--server https://10.0.0.1:6443 --token-file token\nsteadyplane up --bind-address 10.0.0.3", "--server https://10.0.0.9:6443 --token-file token\nsteadyplane up --bind-address 10.0.0.3", "hosts 1 to 4"},
		{"a trailing comment", "remove-node s3", "remove-node s3 # then add it back", "shell syntax"},
		{"a reset followed by up elsewhere", "&& steadyplane up --bind-address 10.0.0.2", "&& steadyplane up --bind-address 10.0.0.3", "not followed by up on the same host"},
		{"another program", "steadyplane kubectl get nodes", "kubectl get nodes", "not a steadyplane command"},
		{"a second kubectl", "steadyplane remove-node s3", "steadyplane kubectl get pods", "second kubectl"},
	} {
		block := strings.Replace(good, tc.from, tc.to, 1)
		if block == good {
			t.Fatalf("%s: the case changes nothing", tc.name)
		}
		if _, err := parseThreeServers(block); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}
