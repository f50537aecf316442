package control

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
)

// Issue 12: the daemon read a job's checkpoint marker whole with cat, so a
// job could make it read any amount. Through a real sshd and agent, a
// 4 MiB marker is now read at most MaxMarkerBytes and refused.
func TestReadMarkerIsBounded(t *testing.T) {
	// The marker is read through the server's agent (as the job's user).
	h := newAgentHost(t, "rp-mk", 31)
	ex, err := NewSSHExecutor(h.fl, []cluster.Server{h.server}, SSHOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ck := t.TempDir()
	spec := &jobspec.Spec{Name: "m", Framework: jobspec.DeepSpeed, CheckpointDir: ck}
	l := Launch{JobID: "j-1", Spec: spec, Servers: []launch.Server{{Name: h.server.Name}}}
	ctx := context.Background()
	os.WriteFile(launch.CheckpointMarker(spec), []byte("global_step42\n"), 0o644)
	if n, _, err := ex.readMarker(ctx, l); err != nil || n != 42 {
		t.Fatalf("marker 42: %d %v", n, err)
	}
	os.WriteFile(launch.CheckpointMarker(spec), []byte("global_step7"+strings.Repeat(" ", 4<<20)), 0o644)
	_, tag, err := ex.readMarker(ctx, l)
	if len(tag) > MaxMarkerBytes || err == nil {
		t.Fatalf("a 4 MiB marker: read %d bytes, err %v", len(tag), err)
	}
}
