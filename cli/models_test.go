package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const tinySpec = `version: 1
name: tiny
tenant: research
class: best-effort
model: {name: tiny, params: 1.1e8, layers: 12, hidden: 768, heads: 12, seq_len: 128, vocab: 30522}
framework: deepspeed
workdir: /w
entrypoint: train.py
global_batch: 32
iterations: 40
checkpoint_dir: /ckpt/tiny
request: {gpus: 4}
`

// TestProfileModelsExportImport: `replan profile SPEC` profiles a new
// model type on a real daemon (sim executor) and prints the fitted model;
// `replan models --json` has type, samples, params, fitted_at and
// err_pct; export writes the Morphling layout and import into another
// daemon gives the same samples; the shared data imports too.
func TestProfileModelsExportImport(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "inv.yaml"), []byte(smokeInventory), 0o644)
	os.WriteFile(filepath.Join(dir, "tiny.yaml"), []byte(tinySpec), 0o644)
	sock := filepath.Join(dir, "s.sock")
	startDaemon(t, dir, "--profile", "--profile-iterations", "3")
	out, err := runCLI(t, "profile", filepath.Join(dir, "tiny.yaml"), "--socket", sock, "--json", "--timeout", "2m")
	if err != nil {
		t.Fatalf("profile: %v\n%s", err, out)
	}
	var mi struct {
		Type     string             `json:"type"`
		Samples  int                `json:"samples"`
		Params   map[string]float64 `json:"params"`
		FittedAt *string            `json:"fitted_at"`
		ErrPct   *float64           `json:"err_pct"`
	}
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&mi); err != nil {
		t.Fatalf("profile --json: %v\n%s", err, out)
	}
	if mi.Type != "tiny/32/deepspeed" || mi.Samples < 4 || mi.Samples > 7 || mi.FittedAt == nil || mi.Params["k_bwd"] <= 0 {
		t.Fatalf("profile: %+v\n%s", mi, out)
	}
	if !strings.Contains(out, "profiling 1/") {
		t.Errorf("no progress line:\n%s", out)
	}
	out, err = runCLI(t, "models", "--socket", sock, "--json")
	if err != nil {
		t.Fatalf("models: %v\n%s", err, out)
	}
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil || len(raw) != 1 {
		t.Fatalf("models --json: %v\n%s", err, out)
	}
	for _, k := range []string{"type", "samples", "params", "fitted_at", "err_pct"} {
		if _, ok := raw[0][k]; !ok {
			t.Errorf("models --json: no %q in %s", k, out)
		}
	}
	if out, err := runCLI(t, "models", "--socket", sock); err != nil || !strings.Contains(out, "tiny/32/deepspeed") || !strings.Contains(out, "k_sync=") {
		t.Errorf("models: %v\n%s", err, out)
	}
	exp := filepath.Join(dir, "export")
	if out, err := runCLI(t, "models", "export", exp, "--socket", sock); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	for _, f := range []string{"config.csv", "data.csv", "arch.yaml"} {
		if _, err := os.Stat(filepath.Join(exp, "profile", "tiny", f)); err != nil {
			t.Errorf("export: %v", err)
		}
	}
	// Another cluster's daemon imports it.
	dir2 := t.TempDir()
	os.WriteFile(filepath.Join(dir2, "inv.yaml"), []byte(smokeInventory), 0o644)
	sock2 := filepath.Join(dir2, "s.sock")
	startDaemon(t, dir2)
	if out, err := runCLI(t, "models", "import", exp, "--socket", sock2); err != nil || !strings.Contains(out, "tiny/32/deepspeed: fitted on") {
		t.Fatalf("import: %v\n%s", err, out)
	}
	out, _ = runCLI(t, "models", "--socket", sock2, "--json")
	var got []struct {
		Type    string `json:"type"`
		Samples int    `json:"samples"`
	}
	json.Unmarshal([]byte(out), &got)
	if len(got) != 1 || got[0].Type != mi.Type || got[0].Samples != mi.Samples {
		t.Errorf("imported %+v, exported %d samples of %s", got, mi.Samples, mi.Type)
	}
	// A bad directory is named.
	if out, err := runCLI(t, "models", "import", filepath.Join(dir, "nowhere"), "--socket", sock2); err == nil || !strings.Contains(err.Error(), "nowhere/profile") {
		t.Errorf("import of a missing directory: %v\n%s", err, out)
	}
	// The shared data is one more import.
	shared := filepath.Join("..", "..", "shared", "data", "morphling")
	if _, err := os.Stat(filepath.Join(shared, "profile")); err != nil {
		t.Logf("no shared data: its import not tried")
		return
	}
	var buf bytes.Buffer
	out, err = runCLI(t, "models", "import", shared, "--socket", sock2)
	buf.WriteString(out)
	if err != nil || !strings.Contains(out, "bert/32/deepspeed: fitted on 7 samples") {
		t.Errorf("import shared: %v\n%s", err, buf.String())
	}
}
