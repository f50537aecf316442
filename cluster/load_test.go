package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeFS is a stat function that knows a fixed set of files.
func fakeFS(files ...string) func(string) (fs.FileInfo, error) {
	return func(path string) (fs.FileInfo, error) {
		for _, f := range files {
			if f == path {
				return nil, nil
			}
		}
		return nil, &fs.PathError{Op: "stat", Path: path, Err: fs.ErrNotExist}
	}
}

var testOpts = Options{Home: "/home/op", Stat: fakeFS("/home/op/.ssh/replan_ed25519", "/home/op/.ssh/other", "/etc/replan/key")}

func TestParseExampleInventory(t *testing.T) {
	data, err := os.ReadFile("../inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := Parse("inventory.yaml", data, testOpts)
	if err != nil {
		t.Fatalf("example inventory: %v", err)
	}
	if got := len(inv.Servers); got != 8 {
		t.Errorf("servers = %d, want 8", got)
	}
	if got := len(inv.Racks); got != 2 {
		t.Errorf("racks = %d, want 2", got)
	}
	s := inv.Servers[3]
	if s.Name != "a800-04" || s.Addr() != "10.0.1.14:22" || s.User != "replan" || s.GPUs != 8 ||
		!s.SSHAgent || s.IdentityFile != "" || s.Labels["maintenance-window"] != "sunday" ||
		s.NVLinkGBps != 400 || s.NICGBps != 100 || s.Rack != "rack-a" {
		t.Errorf("server 3 = %+v", s)
	}
	if tot := inv.Totals(); tot.GPUs != 64 || tot.CPUCores != 768 {
		t.Errorf("totals = %+v", tot)
	}
	want := SSHOptions{KnownHosts: "/home/op/.config/replan/known_hosts", ConnectTimeout: 10 * time.Second,
		Keepalive: 30 * time.Second, MaxSessions: 8}
	if inv.SSH != want {
		t.Errorf("ssh = %+v, want %+v", inv.SSH, want)
	}
}

const good = `version: 1
defaults:
  user: replan
  identity_file: ~/.ssh/replan_ed25519
  gpus: 8
  gpu_memory_gb: 80
  cpu_cores: 96
  host_memory_gb: 1600
  nvlink_gbps: 400
  nic_gbps: 100
racks:
  - {name: rack-a, spine_gbps: 200}
  - {name: rack-b, spine_gbps: 200}
servers:
  - {name: s1, address: 10.0.0.1, rack: rack-a}
  - {name: s2, address: 10.0.0.2, rack: rack-a, port: 2222, user: root, identity_file: /etc/replan/key}
  - {name: s3, address: 10.0.0.3, rack: rack-b, ssh_agent: true, gpus: 4, labels: {a: b}}
tenants:
  - {name: t, gpu_quota: 20, cpu_quota: 288, memory_quota_gb: 4800}
`

func TestParseOverridesAndDefaults(t *testing.T) {
	inv, err := Parse("x.yaml", []byte(good), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := inv.Server("s2")
	if s2.Port != 2222 || s2.User != "root" || s2.IdentityFile != "/etc/replan/key" {
		t.Errorf("s2 = %+v", s2)
	}
	s3, _ := inv.Server("s3")
	if !s3.SSHAgent || s3.GPUs != 4 || s3.Port != 22 || s3.Labels["a"] != "b" {
		t.Errorf("s3 = %+v", s3)
	}
	if inv.Totals().GPUs != 20 {
		t.Errorf("gpus = %d", inv.Totals().GPUs)
	}
}

func TestRelativeIdentityUsesBaseDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "key"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(good, "~/.ssh/replan_ed25519", "key", 1)
	src = strings.Replace(src, "identity_file: /etc/replan/key", "identity_file: key", 1)
	path := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	inv, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if inv.Servers[0].IdentityFile != filepath.Join(dir, "key") {
		t.Errorf("identity = %q", inv.Servers[0].IdentityFile)
	}
}

func TestParseProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want []string // every problem, in order
	}{
		{"unknown rack", good + "", nil},
		{
			"unknown rack and duplicate server",
			strings.Replace(strings.Replace(good, "rack: rack-b, ssh", "rack: rack-c, ssh", 1), "name: s2", "name: s1", 1),
			[]string{
				`x.yaml:16: servers[1].name: duplicate server name "s1" (also servers[0])`,
				`x.yaml:17: servers[2].rack: unknown rack "rack-c"`,
			},
		},
		{
			"unknown field and wrong types",
			strings.Replace(strings.Replace(good, "gpus: 8", "gpus: eight", 1), "user: replan", "user: replan\n  colour: blue", 1),
			[]string{
				`x.yaml:4: defaults.colour: unknown field`,
				`x.yaml:6: defaults.gpus: want an integer, got "eight"`,
			},
		},
		{
			"version",
			strings.Replace(good, "version: 1", "version: 2", 1),
			[]string{`x.yaml:1: version: unsupported version 2 (this replan reads version 1)`},
		},
		{
			"version missing",
			strings.Replace(good, "version: 1\n", "", 1),
			[]string{`x.yaml:1: version: missing required field (want "version: 1" as the first line)`},
		},
		{
			"version not first",
			strings.Replace(good, "version: 1\n", "", 1) + "version: 1\n",
			[]string{`x.yaml:19: version: must be the first field`},
		},
		{
			"duplicate address and port",
			strings.Replace(good, "address: 10.0.0.3", "address: 10.0.0.1", 1),
			[]string{`x.yaml:17: servers[2].address: duplicate address 10.0.0.1:22 (also servers[0])`},
		},
		{
			"same address other port is fine",
			strings.Replace(good, "address: 10.0.0.2", "address: 10.0.0.1", 1),
			nil,
		},
		{
			"missing required",
			strings.Replace(good, "{name: s1, address: 10.0.0.1, rack: rack-a}", "{rack: rack-a}", 1),
			[]string{
				`x.yaml:15: servers[0].name: missing required field`,
				`x.yaml:15: servers[0].address: missing required field`,
			},
		},
		{
			"quota above cluster",
			strings.Replace(good, "gpu_quota: 20", "gpu_quota: 21", 1),
			[]string{`x.yaml:19: tenants[0].gpu_quota: quota 21 exceeds the cluster's 20 GPUs`},
		},
		{
			"missing identity",
			strings.Replace(good, "/etc/replan/key", "~/.ssh/nope", 1),
			[]string{`x.yaml:16: servers[1].identity_file: identity file /home/op/.ssh/nope does not exist`},
		},
		{
			"missing default identity reported once",
			strings.Replace(good, "~/.ssh/replan_ed25519", "~/.ssh/gone", 1),
			[]string{`x.yaml:4: defaults.identity_file: identity file /home/op/.ssh/gone does not exist`},
		},
		{
			"no identity at all",
			strings.Replace(good, "  identity_file: ~/.ssh/replan_ed25519\n", "", 1),
			[]string{
				`x.yaml:14: servers[0].identity_file: missing: set identity_file or ssh_agent: true (here or in defaults)`,
			},
		},
		{
			"bad durations and counts",
			good + "ssh:\n  connect_timeout: soon\n  keepalive: -1s\n  max_sessions: 0\n  jump_host: 'a:b:c'\n  remote_dir: ' '\n",
			[]string{
				`x.yaml:21: ssh.connect_timeout: want a duration like "10s", got "soon"`,
				`x.yaml:22: ssh.keepalive: must be positive, got -1s`,
				`x.yaml:23: ssh.max_sessions: must be positive, got 0`,
				`x.yaml:24: ssh.jump_host: want host or host:port, got "a:b:c"`,
				`x.yaml:25: ssh.remote_dir: want a directory path ("~" and "{server}" allowed), got " "`,
			},
		},
		{
			"non-positive counts",
			strings.Replace(strings.Replace(good, "gpus: 4", "gpus: 0", 1), "port: 2222", "port: 70000", 1),
			[]string{
				`x.yaml:16: servers[1].port: must be a TCP port (1-65535), got 70000`,
				`x.yaml:17: servers[2].gpus: must be positive, got 0`,
			},
		},
		{
			"duplicate rack and tenant, rack without spine",
			strings.Replace(good, "{name: rack-b, spine_gbps: 200}", "{name: rack-a}", 1) +
				"  - {name: t, gpu_quota: -1}\n",
			[]string{
				`x.yaml:13: racks[1].spine_gbps: missing required field`,
				`x.yaml:20: tenants[1].gpu_quota: must not be negative, got -1`,
				`x.yaml:13: racks[1].name: duplicate rack "rack-a" (also racks[0])`,
				`x.yaml:17: servers[2].rack: unknown rack "rack-b"`,
				`x.yaml:20: tenants[1].name: duplicate tenant "t" (also tenants[0])`,
			},
		},
		{
			"duplicate key",
			strings.Replace(good, "  gpus: 8\n", "  gpus: 8\n  gpus: 4\n", 1),
			[]string{`x.yaml:6: defaults.gpus: duplicate field (first set on line 5)`},
		},
		{
			"syntax error",
			"version: 1\nservers: [\n",
			[]string{`x.yaml:2: did not find expected node content`},
		},
		{
			"two documents",
			good + "---\nversion: 1\n",
			[]string{`x.yaml:20: more than one YAML document: an inventory is one document`},
		},
		{
			"empty",
			"",
			[]string{`x.yaml: empty inventory: want a mapping starting with "version: 1"`},
		},
		{
			"not a mapping",
			"- 1\n",
			[]string{`x.yaml:1: want a mapping starting with "version: 1", got a list`},
		},
		{
			"wrong kinds",
			"version: 1\nracks: {}\nservers: [1]\ntenants: 3\nssh: []\n",
			[]string{
				`x.yaml:2: racks: want a list, got a mapping`,
				`x.yaml:3: servers[0]: want a mapping, got "1"`,
				`x.yaml:4: tenants: want a list, got "3"`,
				`x.yaml:5: ssh: want a mapping, got a list`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := Parse("x.yaml", []byte(tc.src), testOpts)
			var got []string
			for _, p := range Problems(err) {
				got = append(got, p.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if err != nil && inv != nil {
				t.Error("inventory returned alongside errors")
			}
			if err != nil {
				var p *Problem
				if !errors.As(err, &p) {
					t.Error("errors.As(*Problem) failed")
				}
			}
		})
	}
}

func TestAliasBombFails(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: 1\nracks: [{name: r, spine_gbps: 1}]\nx: &l {")
	for i := 0; i < 400; i++ {
		fmt.Fprintf(&b, "k%d: v, ", i)
	}
	b.WriteString("}\nservers:\n  - &s {name: s, address: a, rack: r, labels: *l}\n")
	for i := 0; i < 400; i++ {
		b.WriteString("  - *s\n")
	}
	_, err := Parse("x.yaml", []byte(b.String()), testOpts)
	if err == nil || !strings.Contains(err.Error(), "too many aliases") {
		t.Fatalf("want too-many-aliases problem, got %.300v", err)
	}
}

func TestTopology(t *testing.T) {
	inv, err := Parse("x.yaml", []byte(strings.Replace(good, "{name: rack-b, spine_gbps: 200}", "{name: rack-b, spine_gbps: 50}", 1)), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	topo := NewTopology(inv)
	for _, tc := range []struct {
		a, b string
		tier Tier
		bw   float64
	}{
		{"s1", "s1", TierServer, 400},
		{"s1", "s2", TierRack, 100},
		{"s1", "s3", TierCrossRack, 50},
	} {
		tier, err := topo.TierBetween(tc.a, tc.b)
		if err != nil || tier != tc.tier {
			t.Errorf("TierBetween(%s,%s) = %v, %v; want %v", tc.a, tc.b, tier, err, tc.tier)
		}
		bw, _ := topo.BandwidthBetween(tc.a, tc.b)
		if bw != tc.bw {
			t.Errorf("BandwidthBetween(%s,%s) = %v, want %v", tc.a, tc.b, bw, tc.bw)
		}
	}
	if _, err := topo.TierBetween("s1", "nope"); err == nil {
		t.Error("unknown server: want error")
	}
	if topo.Bandwidth(TierCrossRack) != 50 || topo.Bandwidth(TierServer) != 400 || topo.Latency(TierRack) != A800RDMALatency {
		t.Errorf("links = %+v", topo.Links)
	}
	if TierServer.String() != "server" || TierRack.String() != "rack" || TierCrossRack.String() != "cross-rack" || !(TierServer < TierRack && TierRack < TierCrossRack) {
		t.Error("tier names/order")
	}
	if l := A800Links(); l[TierServer].GBps != 400 || l[TierRack].GBps != 100 {
		t.Errorf("A800 links = %+v", l)
	}
}

// Issue 12: tenants name who may submit (users) and act on all their jobs
// (admins) and which Unix user their processes run as (run_as); top-level
// admins may do everything.
func TestParseUsersAdminsRunAs(t *testing.T) {
	data := strings.Replace(good, "  - {name: t, gpu_quota: 20, cpu_quota: 288, memory_quota_gb: 4800}\n",
		"  - {name: t, gpu_quota: 20, users: [alice, bob], admins: [carol], run_as: train-t}\n  - {name: u, users: [dave]}\nadmins: [ops, root]\n", 1)
	inv, err := Parse("x.yaml", []byte(data), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	if tt := inv.Tenants[0]; strings.Join(tt.Users, ",") != "alice,bob" || strings.Join(tt.Admins, ",") != "carol" || tt.RunAs != "train-t" {
		t.Errorf("tenant %+v", tt)
	}
	if strings.Join(inv.Admins, ",") != "ops,root" || len(inv.Tenants[1].Users) != 1 {
		t.Errorf("admins %v tenants %+v", inv.Admins, inv.Tenants)
	}
	bad := strings.Replace(data, "users: [alice, bob]", `users: [alice, "bad user", alice]`, 1)
	bad = strings.Replace(bad, "run_as: train-t", `run_as: "x;rm"`, 1)
	bad = strings.Replace(bad, "admins: [ops, root]", "admins: ops", 1)
	_, err = Parse("x.yaml", []byte(bad), testOpts)
	for _, want := range []string{
		`x.yaml:19: tenants[0].users[1]: want a Unix user name, got "bad user"`,
		`x.yaml:19: tenants[0].users[2]: user "alice" listed twice`,
		`x.yaml:19: tenants[0].run_as: want a Unix user name, got "x;rm"`,
		`x.yaml:21: admins: want a list, got "ops"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
}
