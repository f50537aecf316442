package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replan/replan/control"
)

// Issue 28: the filters, history's attempts, usage and the drain modes
// from the command line, against an in-process daemon (simulated
// executor) on a unix socket: the caller is this process's user.
func TestFiltersHistoryUsageAndDrainFromTheCLI(t *testing.T) {
	sock, d := serveControl(t)
	ctx := context.Background()
	run := func(args ...string) (string, string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		st := Run(ctx, append(args, "--socket", sock), &out, &errb)
		return out.String(), errb.String(), st
	}
	must := func(args ...string) string {
		t.Helper()
		out, errs, st := run(args...)
		if st != 0 {
			t.Fatalf("%v: exit %d: %s", args, st, errs)
		}
		return out
	}
	var who control.WhoAmI
	if err := json.Unmarshal([]byte(must("whoami", "--json")), &who); err != nil || who.User == "" {
		t.Fatalf("whoami: %+v %v", who, err)
	}
	me := who.User
	dir := t.TempDir()
	for _, n := range []string{"one", "two"} {
		file := filepath.Join(dir, n+".yaml")
		spec := strings.NewReplacer("TENANT", "research", "MODEL", "gpt2", "REQUEST", `{gpus: 8, plan: "dp=8,tp=1,pp=1,mb=1,ga=2,zero=0"}`, "name: x", "name: "+n).Replace(cliSpec) + "pin: {plan: true}\n"
		os.WriteFile(file, []byte(spec), 0o644)
		must("submit", file)
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	count := func(args ...string) int {
		t.Helper()
		var v []json.RawMessage
		out := must(append(args, "--json")...)
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
		return len(v)
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"jobs", "--user", me}, 2},
		{[]string{"jobs", "--user", "nobody-" + me}, 0},
		{[]string{"jobs", "--state", "running", "--tenant", "research"}, 2},
		{[]string{"jobs", "--state", "queued"}, 0},
		{[]string{"jobs", "--tenant", "other"}, 0},
		{[]string{"queue", "--user", "nobody-" + me}, 0},
	} {
		if n := count(c.args...); n != c.want {
			t.Errorf("%v: %d entries, want %d", c.args, n, c.want)
		}
	}
	if out := must("events", "--user", "nobody-"+me); out != "" {
		t.Errorf("events --user nobody:\n%s", out)
	}
	if out := must("events", "--user", me, "--state", "running"); !strings.Contains(out, "j-000001") || !strings.Contains(out, "j-000002") {
		t.Errorf("events --user %s --state running:\n%s", me, out)
	}
	if _, errs, st := run("jobs", "--state", "runing"); st == 0 || !strings.Contains(errs, `unknown state "runing"`) {
		t.Errorf("jobs --state runing: exit %d: %s", st, errs)
	}
	// history: one line per job, one per attempt.
	must("cancel", "j-000001")
	out := must("history", "--state", "cancelled", "--since", "1h", "--user", me)
	if !strings.Contains(out, "j-000001 ") || !strings.Contains(out, "j-000001.1 ") || !strings.Contains(out, "DP8·TP1·PP1") || strings.Contains(out, "j-000002") {
		t.Errorf("history:\n%s", out)
	}
	var h []control.HistoryEntry
	if err := json.Unmarshal([]byte(must("history", "--json")), &h); err != nil || len(h) != 1 || h[0].User != me || len(h[0].Attempts) != 1 || h[0].Attempts[0].GPUs != 8 || h[0].Attempts[0].State != "cancelled" {
		t.Errorf("history --json: %+v %v", h, err)
	}
	if n := count("history", "--until", "2000-01-01"); n != 0 {
		t.Errorf("history --until 2000-01-01: %d entries", n)
	}
	if _, errs, st := run("history", "--since", "yesterday"); st == 0 || !strings.Contains(errs, "--since:") {
		t.Errorf("history --since yesterday: exit %d: %s", st, errs)
	}
	// usage: CSV, one line per tenant and user.
	out = must("usage", "--csv", "--since", "24h")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[0] != "tenant,user,gpu_hours,jobs,attempts" || !strings.HasPrefix(lines[1], "research,"+me+",") || !strings.HasSuffix(lines[1], ",2,2") {
		t.Errorf("usage --csv:\n%s", out)
	}
	var u control.Usage
	if err := json.Unmarshal([]byte(must("usage", "--json")), &u); err != nil || len(u.Tenants) != 1 || u.Tenants[0].Tenant != "research" || u.GPUHours <= 0 {
		t.Errorf("usage --json: %+v %v", u, err)
	}
	if _, errs, st := run("usage", "--csv", "--json"); st == 0 || !strings.Contains(errs, "choose one") {
		t.Errorf("usage --csv --json: exit %d: %s", st, errs)
	}
	// drain --after-jobs leaves j-000002 running; nodes says why.
	var nodes []control.NodeView
	json.Unmarshal([]byte(must("nodes", "--json")), &nodes)
	server := ""
	for _, n := range nodes {
		if len(n.Jobs) > 0 {
			server = n.Name
		}
	}
	if server == "" {
		t.Fatalf("no server holds j-000002: %+v", nodes)
	}
	out = must("drain", server, "--after-jobs", "--reason", "bad fan")
	if !strings.Contains(out, server+" draining") {
		t.Errorf("drain --after-jobs:\n%s", out)
	}
	out = must("nodes")
	if !strings.Contains(out, server+" is draining (its jobs finish first: j-000002) by "+me+" since ") || !strings.HasSuffix(strings.TrimSpace(out), ": bad fan") {
		t.Errorf("nodes after drain --after-jobs:\n%s", out)
	}
	if n := count("jobs", "--state", "running"); n != 1 {
		t.Errorf("%d jobs running after drain --after-jobs, want j-000002 still running", n)
	}
}
