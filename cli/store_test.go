package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/control"
	"github.com/replan/replan/internal/etcdtest"
)

// `replan store copy` copies a SQLite store into a real etcd and reports
// the counts; the etcd store then reads the same records; a second copy
// into the now non-empty prefix is refused unless --force.
func TestStoreCopySQLiteToEtcd(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "replan.db")
	st, err := control.OpenSQLite(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for i := 0; i < 3; i++ {
		id, err := st.NextJobID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		j := control.JobRecord{ID: id, Name: fmt.Sprint("job", i), Tenant: "research", Class: "guaranteed", Spec: json.RawMessage(`{"n":1}`), State: control.StateQueued, SubmittedAt: t0.Add(time.Duration(i) * time.Second)}
		if err := st.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AddEvent(ctx, control.Event{Kind: "submit", JobID: id, Msg: "submitted", At: j.SubmittedAt}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AddDecision(ctx, control.DecisionRecord{JobID: id, Kind: "wait", Reason: "full", At: j.SubmittedAt}); err != nil {
			t.Fatal(err)
		}
	}
	j, _ := st.GetJob(ctx, "j-000002")
	j.State = control.StateHeld
	if _, err := st.UpdateJob(ctx, j, "hold", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := st.PutNode(ctx, control.NodeRecord{Name: "a800-01", Reachable: true, UpdatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveModel(ctx, "gpt2/8/deepspeed", json.RawMessage(`{"m":2}`), t0); err != nil {
		t.Fatal(err)
	}
	st.Close()

	eps := etcdtest.Start(t)
	to := "etcd://" + strings.TrimPrefix(eps[0], "http://")
	var out, errb bytes.Buffer
	if err := run(ctx, []string{"store", "copy", "--from", "sqlite:" + db, "--to", to, "--json"}, &out, &errb); err != nil {
		t.Fatalf("store copy: %v (stderr %s)", err, errb.String())
	}
	var got storeCopyJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	c := got.Copied
	if c.Jobs != 3 || c.Events != 3 || c.Decisions != 3 || c.Transitions != 4 || c.Nodes != 1 || c.Models != 1 || got.Prefix != "/replan/" {
		t.Errorf("copied %+v", got)
	}

	src, err := control.OpenSQLite(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := control.OpenEtcdStore(ctx, control.EtcdConfig{Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	ja, _ := src.ListJobs(ctx, control.JobFilter{})
	jb, _ := dst.ListJobs(ctx, control.JobFilter{})
	if len(ja) != 3 || !reflect.DeepEqual(ja, jb) {
		t.Errorf("jobs:\nsqlite %+v\netcd   %+v", ja, jb)
	}
	ea, _ := src.Events(ctx, 0, 100)
	eb, _ := dst.Events(ctx, 0, 100)
	if !reflect.DeepEqual(ea, eb) {
		t.Errorf("events:\nsqlite %+v\netcd   %+v", ea, eb)
	}
	ha, _ := src.History(ctx, "j-000002")
	hb, _ := dst.History(ctx, "j-000002")
	if len(ha) != 2 || !reflect.DeepEqual(ha, hb) {
		t.Errorf("history:\nsqlite %+v\netcd   %+v", ha, hb)
	}
	if id, err := dst.NextJobID(ctx); err != nil || id != "j-000004" {
		t.Errorf("next job ID on etcd %s %v", id, err)
	}

	// The prefix now holds the copy: refused, then --force.
	out.Reset()
	err = run(ctx, []string{"store", "copy", "--from", "sqlite:" + db, "--to", to}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "not empty") || !strings.Contains(err.Error(), "--force") || !strings.Contains(err.Error(), "/replan/") {
		t.Fatalf("copy into a non-empty prefix: %v", err)
	}
	out.Reset()
	if err := run(ctx, []string{"store", "copy", "--from", "sqlite:" + db, "--to", to, "--force"}, &out, &errb); err != nil {
		t.Fatalf("--force: %v", err)
	}
	if !strings.Contains(out.String(), "3 jobs") || !strings.Contains(out.String(), "deleted") {
		t.Errorf("--force output %q", out.String())
	}
	// The copy replaced the etcd records, the next ID included.
	if id, err := dst.NextJobID(ctx); err != nil || id != "j-000004" {
		t.Errorf("next job ID after --force %s %v", id, err)
	}
}

// Bad --from and --to are refused with an error that names them, before
// anything is opened or created.
func TestStoreCopyRefusesBadArguments(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	missing := filepath.Join(dir, "none.db")
	exists := filepath.Join(dir, "replan.db")
	if err := os.WriteFile(exists, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--to", "etcd://127.0.0.1:1"}, "--from is required"},
		{[]string{"--from", "/var/lib/replan.db", "--to", "etcd://127.0.0.1:1"}, "want sqlite:PATH"},
		{[]string{"--from", "sqlite:" + missing, "--to", "etcd://127.0.0.1:1"}, "none.db"},
		{[]string{"--from", "sqlite:" + dir, "--to", "etcd://127.0.0.1:1"}, "a directory"},
		{[]string{"--from", "sqlite:" + exists}, "--to is required"},
		{[]string{"--from", "sqlite:" + exists, "--to", "http://127.0.0.1:2379"}, "want etcd://"},
		{[]string{"--from", "sqlite:" + exists, "--to", "etcd://127.0.0.1:2379,nohost"}, `endpoint 2 "nohost"`},
		{[]string{"--from", "sqlite:" + exists, "--to", "etcds://127.0.0.1:2379", "--cert", "c.pem"}, "--cert and --key go together"},
	} {
		var out, errb bytes.Buffer
		err := run(ctx, append([]string{"store", "copy"}, c.args...), &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error with %q", c.args, err, c.want)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("a refused copy created %s", missing)
	}
}
