package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/replan/replan/internal/timelimit"
	"github.com/replan/replan/internal/yamlcheck"
)

// Problem is one thing wrong with an inventory (or any replan YAML) file.
// Its Error is "file:line: field: message".
type Problem = yamlcheck.Problem

// Problems returns every *Problem joined into err, in order; other errors
// become a Problem with only Msg set.
func Problems(err error) []*Problem { return yamlcheck.Problems(err) }

// Options control the checks Parse makes outside the file itself.
type Options struct {
	// Stat checks that a file exists; nil means os.Stat. Tests inject a
	// fake to control which identity files exist.
	Stat func(path string) (fs.FileInfo, error)
	// Home is the directory "~" expands to; empty means os.UserHomeDir.
	Home string
	// BaseDir is the directory relative identity_file paths are resolved
	// against; empty means the process's working directory. Load sets it to
	// the inventory file's directory.
	BaseDir string
	// SkipIdentityCheck turns off the identity-file existence check (for
	// tools that validate a file meant for another machine).
	SkipIdentityCheck bool
}

// Load reads and validates the inventory file at path. Relative identity
// paths resolve against the file's directory.
func Load(path string) (*Inventory, error) {
	return LoadWith(path, Options{})
}

// LoadWith is Load with options; an empty BaseDir becomes the file's
// directory.
func LoadWith(path string, opts Options) (*Inventory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read inventory: %w", err)
	}
	if opts.BaseDir == "" {
		opts.BaseDir = filepath.Dir(path)
	}
	return Parse(path, data, opts)
}

type parser struct {
	*yamlcheck.Walker
	opts Options
}

// Parse validates data, naming the file name in every problem. It returns
// the inventory, or nil and every problem found joined with errors.Join.
func Parse(name string, data []byte, opts Options) (*Inventory, error) {
	p := &parser{Walker: &yamlcheck.Walker{File: name}, opts: opts}
	inv := p.parse(data)
	if len(p.Errs) > 0 {
		return nil, errors.Join(p.Errs...)
	}
	return inv, nil
}

// host holds the fields shared by defaults and servers; nil means unset.
type host struct {
	node                             *yaml.Node
	name, address, rack              *string
	user, identity, gpuModel         *string
	port, gpus, gpuMem, cpu, hostMem *int
	sshAgent                         *bool
	nvlink, nic                      *float64
	labels                           map[string]string
	lines                            map[string]int // field → line
}

func (p *parser) host(n *yaml.Node, path string, isServer bool) *host {
	h := &host{node: n, lines: map[string]int{}}
	setS := func(dst **string) func(string, *yaml.Node) {
		return func(f string, v *yaml.Node) {
			if s, ok := p.Str(v, f); ok {
				*dst = &s
			}
		}
	}
	setC := func(dst **int) func(string, *yaml.Node) {
		return func(f string, v *yaml.Node) {
			if i, ok := p.Count(v, f); ok {
				*dst = &i
			}
		}
	}
	setR := func(dst **float64) func(string, *yaml.Node) {
		return func(f string, v *yaml.Node) {
			if r, ok := p.Positive(v, f); ok {
				*dst = &r
			}
		}
	}
	fields := map[string]func(string, *yaml.Node){
		"user":          setS(&h.user),
		"identity_file": setS(&h.identity),
		"gpu_model":     setS(&h.gpuModel),
		"port": func(f string, v *yaml.Node) {
			if i, ok := p.Count(v, f); ok {
				if i > 65535 {
					p.Errf(v, f, "must be a TCP port (1-65535), got %d", i)
					return
				}
				h.port = &i
			}
		},
		"gpus":           setC(&h.gpus),
		"gpu_memory_gb":  setC(&h.gpuMem),
		"cpu_cores":      setC(&h.cpu),
		"host_memory_gb": setC(&h.hostMem),
		"nvlink_gbps":    setR(&h.nvlink),
		"nic_gbps":       setR(&h.nic),
		"ssh_agent": func(f string, v *yaml.Node) {
			if b, ok := p.Bool(v, f); ok {
				h.sshAgent = &b
			}
		},
		"labels": func(f string, v *yaml.Node) { h.labels = p.labelsField(v, f) }, // labels.go
	}
	if isServer {
		fields["name"] = setS(&h.name)
		fields["address"] = setS(&h.address)
		fields["rack"] = setS(&h.rack)
	}
	seen := p.Mapping(n, path, fields)
	for k, kn := range seen {
		h.lines[k] = kn.Line
	}
	return h
}

func (p *parser) parse(data []byte) *Inventory {
	root := p.Document(data, "an inventory", `a mapping starting with "version: 1"`)
	if root == nil {
		return nil
	}

	var (
		defaults   *host
		rackNodes  []*yaml.Node
		racks      []Rack
		servers    []*host
		serverPath []string
		tenants    []Tenant
		tenantNode []*yaml.Node
		tenantPath []string
		sshOpts    = SSHOptions{
			KnownHosts:     DefaultKnownHosts,
			ConnectTimeout: DefaultConnectTimeout,
			Keepalive:      DefaultKeepalive,
			MaxSessions:    DefaultMaxSessions,
		}
		knownHostsNode *yaml.Node
		admins         []string
	)
	seen := p.Mapping(root, "", map[string]func(string, *yaml.Node){
		"version": func(f string, v *yaml.Node) {
			if i, ok := p.Int(v, f); ok {
				if i != Version {
					p.Errf(v, f, "unsupported version %d (this replan reads version %d)", i, Version)
				}
			}
		},
		"defaults": func(f string, v *yaml.Node) { defaults = p.host(v, f, false) },
		"racks": func(f string, v *yaml.Node) {
			p.List(v, f, func(i int, path string, item *yaml.Node) {
				var r Rack
				got := p.Mapping(item, path, map[string]func(string, *yaml.Node){
					"name":       func(f string, v *yaml.Node) { r.Name, _ = p.Str(v, f) },
					"spine_gbps": func(f string, v *yaml.Node) { r.SpineGBps, _ = p.Positive(v, f) },
					"labels":     func(f string, v *yaml.Node) { r.Labels = p.labelsField(v, f) },
				})
				if item.Kind == yaml.MappingNode {
					for _, req := range []string{"name", "spine_gbps"} {
						if got[req] == nil {
							p.Errf(item, yamlcheck.JoinPath(path, req), "missing required field")
						}
					}
				}
				racks = append(racks, r)
				rackNodes = append(rackNodes, item)
			})
		},
		"servers": func(f string, v *yaml.Node) {
			p.List(v, f, func(i int, path string, item *yaml.Node) {
				servers = append(servers, p.host(item, path, true))
				serverPath = append(serverPath, path)
			})
		},
		"tenants": func(f string, v *yaml.Node) {
			p.List(v, f, func(i int, path string, item *yaml.Node) {
				var t Tenant
				got := p.Mapping(item, path, map[string]func(string, *yaml.Node){
					"name":               func(f string, v *yaml.Node) { t.Name, _ = p.Str(v, f) },
					"gpu_quota":          func(f string, v *yaml.Node) { t.GPUQuota, _ = p.NonNegative(v, f) },
					"cpu_quota":          func(f string, v *yaml.Node) { t.CPUQuota, _ = p.NonNegative(v, f) },
					"memory_quota_gb":    func(f string, v *yaml.Node) { t.MemoryQuotaGB, _ = p.NonNegative(v, f) },
					"users":              func(f string, v *yaml.Node) { t.Users = p.userList(v, f) },
					"time_limit_default": func(f string, v *yaml.Node) { t.TimeLimitDefault = p.timeLimit(v, f) },
					"time_limit_max":     func(f string, v *yaml.Node) { t.TimeLimitMax = p.timeLimit(v, f) },
					"admins":             func(f string, v *yaml.Node) { t.Admins = p.userList(v, f) },
					"run_as": func(f string, v *yaml.Node) {
						if u, ok := p.Str(v, f); ok {
							if !userRE.MatchString(u) {
								p.Errf(v, f, "want a Unix user name, got %q", u)
							}
							t.RunAs = u
						}
					},
				})
				if item.Kind == yaml.MappingNode && got["name"] == nil {
					p.Errf(item, yamlcheck.JoinPath(path, "name"), "missing required field")
				}
				if t.TimeLimitMax > 0 && t.TimeLimitDefault > t.TimeLimitMax {
					p.Errf(got["time_limit_default"], yamlcheck.JoinPath(path, "time_limit_default"), "the default %s is above the tenant's time_limit_max %s",
						timelimit.Format(t.TimeLimitDefault), timelimit.Format(t.TimeLimitMax))
				}
				tenants = append(tenants, t)
				tenantNode = append(tenantNode, item)
				tenantPath = append(tenantPath, path)
			})
		},
		"admins": func(f string, v *yaml.Node) { admins = p.userList(v, f) },
		"ssh": func(f string, v *yaml.Node) {
			p.Mapping(v, f, map[string]func(string, *yaml.Node){
				"known_hosts": func(f string, v *yaml.Node) {
					if s, ok := p.Str(v, f); ok {
						sshOpts.KnownHosts = s
						knownHostsNode = v
					}
				},
				"connect_timeout": func(f string, v *yaml.Node) {
					if d, ok := p.Duration(v, f); ok {
						sshOpts.ConnectTimeout = d
					}
				},
				"keepalive": func(f string, v *yaml.Node) {
					if d, ok := p.Duration(v, f); ok {
						sshOpts.Keepalive = d
					}
				},
				"max_sessions": func(f string, v *yaml.Node) {
					if i, ok := p.Count(v, f); ok {
						sshOpts.MaxSessions = i
					}
				},
				"remote_dir": func(f string, v *yaml.Node) {
					s, ok := p.Str(v, f)
					if !ok {
						return
					}
					if strings.TrimSpace(s) == "" || strings.ContainsAny(s, "\x00\n") {
						p.Errf(v, f, "want a directory path (\"~\" and \"{server}\" allowed), got %q", s)
						return
					}
					sshOpts.RemoteDir = s
				},
				"jump_host": func(f string, v *yaml.Node) {
					s, ok := p.Str(v, f)
					if !ok {
						return
					}
					if strings.Contains(s, ":") {
						if _, port, err := net.SplitHostPort(s); err != nil || !validPort(port) {
							p.Errf(v, f, "want host or host:port, got %q", s)
							return
						}
					}
					sshOpts.JumpHost = s
				},
			})
		},
	})

	// version must be present and first, so later versions may change
	// everything after it.
	if seen["version"] == nil {
		p.Errf(root, "version", "missing required field (want \"version: 1\" as the first line)")
	} else if len(root.Content) > 0 && root.Content[0] != seen["version"] {
		p.Errf(seen["version"], "version", "must be the first field")
	}
	if seen["servers"] == nil {
		p.Errf(root, "servers", "missing required field")
	}
	if seen["racks"] == nil {
		p.Errf(root, "racks", "missing required field")
	}

	inv := &Inventory{Version: Version, SSH: sshOpts}

	// Paths: expand ~ once.
	home := p.opts.Home
	expand := func(path string) (string, error) {
		if path != "~" && !strings.HasPrefix(path, "~/") {
			if !filepath.IsAbs(path) && p.opts.BaseDir != "" {
				path = filepath.Join(p.opts.BaseDir, path)
			}
			return path, nil
		}
		if home == "" {
			h, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("cannot expand ~: %v", err)
			}
			home = h
		}
		return filepath.Join(home, strings.TrimPrefix(path, "~")), nil
	}
	stat := p.opts.Stat
	if stat == nil {
		stat = os.Stat
	}
	checkIdentity := func(n *yaml.Node, field, raw string) string {
		path, err := expand(raw)
		if err != nil {
			p.Errf(n, field, "%v", err)
			return ""
		}
		if p.opts.SkipIdentityCheck {
			return path
		}
		if fi, err := stat(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				p.Errf(n, field, "identity file %s does not exist", path)
			} else {
				p.Errf(n, field, "identity file %s: %v", path, err)
			}
			return ""
		} else if fi != nil && fi.IsDir() {
			p.Errf(n, field, "identity file %s is a directory", path)
			return ""
		}
		return path
	}
	if kh, err := expand(inv.SSH.KnownHosts); err != nil {
		p.Errf(knownHostsNode, "ssh.known_hosts", "%v", err)
	} else {
		inv.SSH.KnownHosts = kh
	}

	// Defaults.
	if defaults == nil {
		defaults = &host{lines: map[string]int{}}
	}
	d := &inv.Defaults
	d.User = deref(defaults.user)
	d.Port = deref(defaults.port)
	d.SSHAgent = deref(defaults.sshAgent)
	d.GPUModel = deref(defaults.gpuModel)
	d.GPUs = deref(defaults.gpus)
	d.GPUMemoryGB = deref(defaults.gpuMem)
	d.CPUCores = deref(defaults.cpu)
	d.HostMemoryGB = deref(defaults.hostMem)
	d.NVLinkGBps = deref(defaults.nvlink)
	d.NICGBps = deref(defaults.nic)
	d.Labels = defaults.labels
	defaultIdentityOK := false
	if defaults.identity != nil {
		n := &yaml.Node{Line: defaults.lines["identity_file"]}
		d.IdentityFile = checkIdentity(n, "defaults.identity_file", *defaults.identity)
		defaultIdentityOK = d.IdentityFile != ""
	}

	// Racks.
	rackIdx := map[string]int{}
	for i, r := range racks {
		if r.Name == "" {
			continue
		}
		if j, dup := rackIdx[r.Name]; dup {
			p.Errf(rackNodes[i], fmt.Sprintf("racks[%d].name", i), "duplicate rack %q (also racks[%d])", r.Name, j)
			continue
		}
		rackIdx[r.Name] = i
	}
	inv.Racks = racks

	// Servers: apply defaults, then check.
	names := map[string]string{}
	addrs := map[string]string{}
	for i, h := range servers {
		path := serverPath[i]
		line := func(field string) *yaml.Node {
			if l, ok := h.lines[field]; ok {
				return &yaml.Node{Line: l}
			}
			return h.node
		}
		missing := func(field string) {
			p.Errf(h.node, path+"."+field, "missing required field (set it here or in defaults)")
		}
		s := Server{
			Name:         deref(h.name),
			Address:      deref(h.address),
			Rack:         deref(h.rack),
			User:         pick(h.user, d.User),
			Port:         pick(h.port, d.Port),
			SSHAgent:     pick(h.sshAgent, d.SSHAgent),
			GPUModel:     pick(h.gpuModel, d.GPUModel),
			GPUs:         pick(h.gpus, d.GPUs),
			GPUMemoryGB:  pick(h.gpuMem, d.GPUMemoryGB),
			CPUCores:     pick(h.cpu, d.CPUCores),
			HostMemoryGB: pick(h.hostMem, d.HostMemoryGB),
			NVLinkGBps:   pick(h.nvlink, d.NVLinkGBps),
			NICGBps:      pick(h.nic, d.NICGBps),
		}
		if h.node.Kind != yaml.MappingNode {
			inv.Servers = append(inv.Servers, s)
			continue
		}
		if s.Port == 0 && h.lines["port"] == 0 && defaults.lines["port"] == 0 {
			s.Port = DefaultPort
		}
		var rackLabels map[string]string
		if r, ok := rackIdx[s.Rack]; ok {
			rackLabels = racks[r].Labels
		}
		s.Labels = mergeLabels(d.Labels, rackLabels, h.labels) // labels.go
		// Required fields, reported only when absent everywhere (a present
		// but invalid value has already been reported where it is).
		for _, req := range []struct {
			field string
			unset bool
		}{
			{"name", s.Name == ""},
			{"address", s.Address == ""},
			{"rack", s.Rack == ""},
		} {
			if req.unset && h.lines[req.field] == 0 {
				p.Errf(h.node, path+"."+req.field, "missing required field")
			}
		}
		for _, req := range []struct {
			field string
			unset bool
		}{
			{"user", s.User == ""},
			{"gpus", s.GPUs == 0},
			{"gpu_memory_gb", s.GPUMemoryGB == 0},
			{"cpu_cores", s.CPUCores == 0},
			{"host_memory_gb", s.HostMemoryGB == 0},
			{"nvlink_gbps", s.NVLinkGBps == 0},
			{"nic_gbps", s.NICGBps == 0},
		} {
			if req.unset && h.lines[req.field] == 0 && defaults.lines[req.field] == 0 {
				missing(req.field)
			}
		}
		// Identity: a server's own identity_file, else the default one
		// (already checked once), else ssh_agent must be true.
		switch {
		case h.identity != nil:
			s.IdentityFile = checkIdentity(line("identity_file"), path+".identity_file", *h.identity)
		case defaults.identity != nil:
			if defaultIdentityOK {
				s.IdentityFile = d.IdentityFile
			}
		case !s.SSHAgent && h.lines["ssh_agent"] == 0 && defaults.lines["ssh_agent"] == 0:
			p.Errf(h.node, path+".identity_file", "missing: set identity_file or ssh_agent: true (here or in defaults)")
		case !s.SSHAgent:
			p.Errf(line("ssh_agent"), path+".ssh_agent", "ssh_agent is false and no identity_file is set")
		}
		if s.Name != "" {
			if prev, dup := names[s.Name]; dup {
				p.Errf(line("name"), path+".name", "duplicate server name %q (also %s)", s.Name, prev)
			} else {
				names[s.Name] = path
			}
		}
		if s.Address != "" && s.Port != 0 {
			key := s.Addr()
			if prev, dup := addrs[key]; dup {
				p.Errf(line("address"), path+".address", "duplicate address %s (also %s)", key, prev)
			} else {
				addrs[key] = path
			}
		}
		if _, ok := rackIdx[s.Rack]; s.Rack != "" && !ok && seen["racks"] != nil {
			p.Errf(line("rack"), path+".rack", "unknown rack %q", s.Rack)
		}
		inv.Servers = append(inv.Servers, s)
	}
	if seen["servers"] != nil && len(servers) == 0 && len(p.Errs) == 0 {
		p.Errf(seen["servers"], "servers", "must list at least one server")
	}

	// Tenants: unique names, quotas within the cluster (only checked when
	// everything before is valid, as otherwise the totals are wrong).
	tot := inv.Totals()
	checkQuota := len(p.Errs) == 0
	tenantNames := map[string]string{}
	for i, t := range tenants {
		path := tenantPath[i]
		if t.Name != "" {
			if prev, dup := tenantNames[t.Name]; dup {
				p.Errf(tenantNode[i], path+".name", "duplicate tenant %q (also %s)", t.Name, prev)
			} else {
				tenantNames[t.Name] = path
			}
		}
		for _, q := range []struct {
			field      string
			quota, max int
			unit       string
		}{
			{"gpu_quota", t.GPUQuota, tot.GPUs, "GPUs"},
			{"cpu_quota", t.CPUQuota, tot.CPUCores, "CPU cores"},
			{"memory_quota_gb", t.MemoryQuotaGB, tot.HostMemoryGB, "GB of host memory"},
		} {
			if checkQuota && q.quota > q.max {
				p.Errf(yamlcheck.FieldNode(tenantNode[i], q.field), path+"."+q.field, "quota %d exceeds the cluster's %d %s", q.quota, q.max, q.unit)
			}
		}
	}
	inv.Tenants = tenants
	inv.Admins = admins
	if len(p.Errs) > 0 {
		return nil
	}
	return inv
}

// userRE is a portable Unix user name (POSIX, plus the common '.').
var userRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9._-]{0,31}$`)

// userList reads a list of Unix user names (tenants[].users, admins).
// timeLimit reads a tenant's time limit (tenants[].time_limit_default,
// time_limit_max) as a job spec's time_limit is read.
func (p *parser) timeLimit(v *yaml.Node, f string) time.Duration {
	s, ok := p.Str(v, f)
	if !ok {
		return 0
	}
	d, err := timelimit.Parse(s)
	if err != nil {
		p.Errf(v, f, "%v", err)
		return 0
	}
	return d
}

func (p *parser) userList(v *yaml.Node, f string) []string {
	out := []string{}
	seen := map[string]bool{}
	p.List(v, f, func(i int, path string, item *yaml.Node) {
		u, ok := p.Str(item, path)
		if !ok {
			return
		}
		switch {
		case !userRE.MatchString(u):
			p.Errf(item, path, "want a Unix user name, got %q", u)
		case seen[u]:
			p.Errf(item, path, "user %q listed twice", u)
		default:
			seen[u] = true
			out = append(out, u)
		}
	})
	return out
}

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > 0 && n <= 65535
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func pick[T any](p *T, def T) T {
	if p != nil {
		return *p
	}
	return def
}
