package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/control"
	"github.com/replan/replan/sched"
)

// TestNodesShowCordonedGPUAndUncordonClearsIt: Xid 79 on GPU 3 of server
// a (the simulated cluster's health from a fake agent backend): `replan
// nodes` and --json show the cordon and its cause, `replan uncordon a:3`
// clears it, and a second uncordon or a malformed SERVER:GPU fails with
// a clear error.
func TestNodesShowCordonedGPUAndUncordonClearsIt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dir := t.TempDir()
	st, err := control.OpenSQLite(ctx, filepath.Join(dir, "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ex := control.NewSimExecutor(time.Now, []string{"a", "b"}, nil, nil, 0)
	fake, _ := agent.NewFakeBackend("8xA800")
	ex.SetGPUBackend("a", fake)
	p, _ := sched.New("static")
	d, err := control.New(ctx, control.Config{Store: st, Exec: ex, Policy: p,
		Servers: []control.ServerInfo{{Name: "a", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}, {Name: "b", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []control.TenantInfo{{Name: "research", QuotaGPUs: 16}}})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	l, err := control.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go control.Serve(ctx, l, (&control.API{D: d, Version: "test"}).Handler())
	fake.InjectXid(3, 79)
	if err := d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Run(ctx, append(args, "--socket", sock), &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errs := run("nodes", "--gpus")
	if code != 0 || !strings.Contains(out, "a GPU 3 is cordoned (no new work; `replan uncordon a:3` clears it): Xid 79 (GPU has fallen off the bus)") ||
		!strings.Contains(out, "cordoned: Xid 79") || !strings.Contains(out, "16 GPUs, 15 free") {
		t.Fatalf("nodes: %d\n%s%s", code, out, errs)
	}
	code, out, _ = run("nodes", "--json")
	var nodes []control.NodeView
	if err := json.Unmarshal([]byte(out), &nodes); code != 0 || err != nil || len(nodes) != 2 || len(nodes[0].CordonedGPUs) != 1 ||
		nodes[0].CordonedGPUs[0].GPU != 3 || nodes[0].CordonedGPUs[0].Cause != "xid-79" || !nodes[0].GPUStats[3].Cordoned || nodes[0].FreeGPUs != 7 {
		t.Fatalf("nodes --json: %d %v %s", code, err, out)
	}
	if code, out, errs := run("uncordon", "a:3"); code != 0 || out != "a GPU 3 back in service\n" {
		t.Fatalf("uncordon: %d %q %s", code, out, errs)
	}
	if code, out, _ := run("nodes"); code != 0 || strings.Contains(out, "cordoned") || !strings.Contains(out, "16 free") {
		t.Fatalf("nodes after uncordon: %d\n%s", code, out)
	}
	if code, _, errs := run("uncordon", "a:3"); code != 1 || !strings.Contains(errs, "uncordon a:3: not cordoned") {
		t.Errorf("second uncordon: %d %s", code, errs)
	}
	for _, bad := range []string{"a", "a:x", ":3", "a:-1"} {
		if code, _, errs := run("uncordon", bad); code != 1 || !strings.Contains(errs, "want SERVER:GPU") {
			t.Errorf("uncordon %s: %d %s", bad, code, errs)
		}
	}
	if code, _, errs := run("uncordon", "a:9"); code != 1 || !strings.Contains(errs, "a has GPUs 0..7, not 9") {
		t.Errorf("uncordon a:9: %d %s", code, errs)
	}
}
