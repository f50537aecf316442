package control

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/fleet"
	"github.com/replan/replan/internal/sshtest"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
	"github.com/replan/replan/ssh"
)

// Issue 12: the daemon read a job's checkpoint marker whole with cat, so a
// job could make it read any amount. Through a real sshd, a 4 MiB marker is
// now read at most MaxMarkerBytes and refused.
func TestReadMarkerIsBounded(t *testing.T) {
	if ok, why := sshtest.Available(); !ok {
		t.Skip(why)
	}
	s := sshtest.Start(t, sshtest.Config{})
	kh := filepath.Join(t.TempDir(), "known_hosts")
	s.AppendKnownHosts(kh)
	pool, err := ssh.NewPool(ssh.Config{HostKeys: ssh.NewHostKeys(kh, false, nil), ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	srv := cluster.Server{Name: "s1", Address: s.Host, Port: s.Port, User: s.User, IdentityFile: s.ClientKey, GPUs: 8}
	ex, err := NewSSHExecutor(fleet.New(pool, fleet.Options{}), []cluster.Server{srv}, SSHOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ck := t.TempDir()
	spec := &jobspec.Spec{Name: "m", Framework: jobspec.DeepSpeed, CheckpointDir: ck}
	l := Launch{JobID: "j-1", Spec: spec, Servers: []launch.Server{{Name: "s1"}}}
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
