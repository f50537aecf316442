package control_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/control"
	"github.com/replan/replan/sched"
)

// TestSubmitRefusesMegatronArgsThatContradictTheModel: POST /v1/jobs
// refuses a Megatron job whose args contradict its model type (or give a
// flag replan renders), naming the flag and the field (issue 13), and
// takes the same job without them.
func TestSubmitRefusesMegatronArgsThatContradictTheModel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	st, err := control.OpenSQLite(ctx, filepath.Join(dir, "replan.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	policy, err := sched.NewWithRestartCost("morphling", 5)
	if err != nil {
		t.Fatal(err)
	}
	d, err := control.New(ctx, control.Config{Store: st, Exec: control.NewSimExecutor(time.Now, []string{"a"}, nil, nil, 0), Policy: policy,
		Servers: []control.ServerInfo{{Name: "a", Address: "a", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 512}},
		Tenants: []control.TenantInfo{{Name: "research", QuotaGPUs: 8}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "replan.sock")
	l, err := control.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go control.Serve(ctx, l, (&control.API{D: d, Version: "test"}).Handler())
	client := control.NewUnixClient(sock)
	spec := func(args string) []byte {
		return fmt.Appendf(nil, `version: 1
name: tiny
tenant: research
class: best-effort
model: {name: tinygpt, params: 134912, layers: 2, hidden: 64, heads: 4, seq_len: 32, vocab: 256}
framework: megatron
workdir: /w
entrypoint: train.py
args: [%s]
global_batch: 16
iterations: 10
checkpoint_dir: /ckpt/tiny
request: {gpus: 4}
`, args)
	}
	for args, want := range map[string]string{
		`--hidden-size, "128"`:            "tiny.yaml: args: --hidden-size 128 contradicts model tinygpt's hidden 64",
		`--max-position-embeddings, "16"`: "--max-position-embeddings 16 is below model tinygpt's seq_len 32",
		`--global-batch-size, "32"`:       "--global-batch-size is rendered by replan from global_batch",
	} {
		if _, err := client.Submit(ctx, "tiny.yaml", spec(args)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("args [%s]: %v, want %q", args, err, want)
		}
	}
	rec, err := client.Submit(ctx, "tiny.yaml", spec(`--tokenizer-type, NullTokenizer, --hidden-size, "64"`))
	if err != nil || rec.ID == "" {
		t.Fatalf("args that agree with the model: %+v, %v", rec, err)
	}
}
