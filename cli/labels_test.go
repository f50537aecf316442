package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replan/replan/control"
)

// Node features through the CLI: `replan nodes` shows each server's
// inventory labels (a LABELS column; --json "labels"), and a spec whose
// constraint no server carries is refused at submit with file, line and
// field.
func TestNodesShowLabelsAndSubmitRefusesUnknownLabel(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	inv := strings.Replace(smokeInventory, "port: 2202, rack: r1}", "port: 2202, rack: r1, labels: [ib-hdr, nvme]}", 1)
	os.WriteFile(filepath.Join(dir, "inv.yaml"), []byte(inv), 0o644)
	startDaemon(t, dir)
	out, err := runCLI(t, "nodes", "--socket", sock, "--json")
	if err != nil {
		t.Fatalf("nodes --json: %v\n%s", err, out)
	}
	var nodes []control.NodeView
	if err := json.Unmarshal([]byte(out), &nodes); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(nodes) != 2 {
		t.Fatalf("nodes: %s", out)
	}
	if _, ok := nodes[1].Labels["ib-hdr"]; !ok || len(nodes[0].Labels) != 0 || len(nodes[1].Labels) != 2 || !strings.Contains(out, `"labels": {`) {
		t.Errorf("labels in nodes --json: %s", out)
	}
	out, err = runCLI(t, "nodes", "--socket", sock)
	if err != nil {
		t.Fatalf("nodes: %v\n%s", err, out)
	}
	if !strings.Contains(out, "LABELS") || !strings.Contains(out, "ib-hdr,nvme") {
		t.Errorf("nodes table lacks the labels:\n%s", out)
	}
	spec := "version: 1\nname: ib\ntenant: research\nclass: best-effort\nmodel: gpt2\nframework: deepspeed\nworkdir: /w\nentrypoint: train.py\nglobal_batch: 16\niterations: 10\ncheckpoint_dir: /ckpt/ib\nrequest: {gpus: 8}\nconstraint: {labels: [roce]}\n"
	os.WriteFile(filepath.Join(dir, "ib.yaml"), []byte(spec), 0o644)
	out, err = runCLI(t, "submit", filepath.Join(dir, "ib.yaml"), "--socket", sock)
	if err == nil || !strings.Contains(out+err.Error(), "ib.yaml:13: constraint.labels: no server of the inventory carries roce (the servers' labels: ib-hdr, nvme)") {
		t.Errorf("submit with an unknown label: %v\n%s", err, out)
	}
}
