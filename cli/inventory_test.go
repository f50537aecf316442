package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInventoryCheckExampleIsValid(t *testing.T) {
	out, err := runCLI(t, "inventory", "check", "../inventory.yaml")
	if err != nil {
		t.Fatalf("the documented example must validate: %v\n%s", err, out)
	}
	if !strings.Contains(out, "ok: 8 servers in 2 racks") {
		t.Errorf("summary: %s", out)
	}
}

func TestInventoryCheckReportsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "inv.yaml")
	data := "version: 1\n" +
		"defaults: {user: r, ssh_agent: true, gpus: 8, gpu_memory_gb: 80, cpu_cores: 96, host_memory_gb: 1600, nvlink_gbps: 400, nic_gbps: 100}\n" +
		"racks: [{name: r1, spine_gbps: 100}]\n" +
		"servers:\n" +
		"  - {name: a, address: 10.0.0.1, rack: r1}\n" +
		"  - {name: a, address: 10.0.0.2, rack: r2, colour: red}\n"
	if err := os.WriteFile(bad, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "inventory", "check", bad)
	if err == nil {
		t.Fatalf("bad inventory accepted:\n%s", out)
	}
	for _, want := range []string{bad + ":6: servers[1].colour", bad + ":6: servers[1].name: duplicate", "r2"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	js, _ := runCLI(t, "inventory", "check", bad, "--json")
	var got inventoryCheckJSON
	if err := json.Unmarshal([]byte(js[:strings.LastIndex(js, "}")+1]), &got); err != nil {
		t.Fatalf("json: %v\n%s", err, js)
	}
	if got.OK || len(got.Problems) < 3 {
		t.Errorf("json: ok %v, %d problems", got.OK, len(got.Problems))
	}
}
