package cluster

import (
	"maps"
	"strings"
	"testing"
)

const labelled = `version: 1
defaults:
  user: replan
  identity_file: ~/.ssh/replan_ed25519
  gpus: 8
  gpu_memory_gb: 80
  cpu_cores: 96
  host_memory_gb: 1600
  nvlink_gbps: 400
  nic_gbps: 100
  labels: [a800-80g]
racks:
  - {name: rack-a, spine_gbps: 200, labels: [ib-hdr]}
  - {name: rack-b, spine_gbps: 200}
servers:
  - {name: s1, address: 10.0.0.1, rack: rack-a}
  - {name: s2, address: 10.0.0.2, rack: rack-a, labels: {nvme: "", ib-hdr: ndr}}
  - {name: s3, address: 10.0.0.3, rack: rack-b, labels: [roce, nvme]}
`

// Node features: labels as a list (names) or a mapping (names to values),
// on defaults, racks and servers, merged in that order.
func TestInventoryLabels(t *testing.T) {
	inv, err := Parse("inventory.yaml", []byte(labelled), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"s1": {"a800-80g": "", "ib-hdr": ""},
		"s2": {"a800-80g": "", "ib-hdr": "ndr", "nvme": ""},
		"s3": {"a800-80g": "", "roce": "", "nvme": ""},
	}
	for _, s := range inv.Servers {
		if !maps.Equal(s.Labels, want[s.Name]) {
			t.Errorf("%s: labels %v, want %v", s.Name, s.Labels, want[s.Name])
		}
	}
	if r, _ := inv.Rack("rack-a"); !maps.Equal(r.Labels, map[string]string{"ib-hdr": ""}) {
		t.Errorf("rack-a labels %v", r.Labels)
	}
}

// Bad labels are refused with file, line and field.
func TestInventoryLabelErrors(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{"labels: [roce, nvme]", "labels: [roce, roce]", `inventory.yaml:18: servers[2].labels[1]: label "roce" listed twice (first on line 18)`},
		{"labels: [roce, nvme]", `labels: ["ib hdr"]`, `inventory.yaml:18: servers[2].labels[0]: label name "ib hdr"`},
		{"labels: [roce, nvme]", "labels: roce", "inventory.yaml:18: servers[2].labels: want a list of label names or a mapping"},
		{"labels: [roce, nvme]", "labels: [[roce]]", "inventory.yaml:18: servers[2].labels[0]: want a string"},
		{`labels: {nvme: "", ib-hdr: ndr}`, `labels: {"nv me": x}`, `inventory.yaml:17: servers[1].labels.nv me: label name "nv me"`},
		{`labels: {nvme: "", ib-hdr: ndr}`, `labels: {ib-hdr: "a b"}`, `inventory.yaml:17: servers[1].labels.ib-hdr: label value "a b"`},
		{"spine_gbps: 200, labels: [ib-hdr]", "spine_gbps: 200, labels: [-ib]", `inventory.yaml:13: racks[0].labels[0]: label name "-ib"`},
		{"labels: [a800-80g]", "labels: [a800_80g_]", `inventory.yaml:11: defaults.labels[0]: label name "a800_80g_"`},
		{"spine_gbps: 200, labels: [ib-hdr]", "spine_gbps: 200, tags: [ib-hdr]", `inventory.yaml:13: racks[0].tags: unknown field`},
	} {
		data := strings.Replace(labelled, c.from, c.to, 1)
		if data == labelled {
			t.Fatalf("%q not in the inventory", c.from)
		}
		_, err := Parse("inventory.yaml", []byte(data), testOpts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant %q", c.to, err, c.want)
		}
	}
}
