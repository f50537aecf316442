package cli

import (
	"strings"
	"testing"

	"github.com/replan/replan/control"
)

// TestNodesTableRedeploying: a server whose agent the daemon starts again
// reads "redeploying", with its last failed try; one it gave up on reads
// down with the reason.
func TestNodesTableRedeploying(t *testing.T) {
	nodes := []control.NodeView{
		{ServerInfo: control.ServerInfo{Name: "b1", Rack: "r1", GPUs: 2}, State: "redeploying", Missed: 4, GPUOwners: []string{"", ""},
			DownWhy: "deploy agent to b1: agent did not answer within 30s"},
		{ServerInfo: control.ServerInfo{Name: "b2", Rack: "r1", GPUs: 2}, State: "down", Missed: 9, GPUOwners: []string{"", ""},
			DownWhy: "deploy agent to b2: upload: disk full"},
	}
	var b strings.Builder
	if err := writeDaemonNodes(&b, nodes, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"b1 is redeploying: 4 heartbeats missed, the daemon starts its agent again; last try: deploy agent to b1: agent did not answer within 30s",
		"b2 is down: 9 heartbeats missed; its agent could not be started: deploy agent to b2: upload: disk full",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
}
