package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Problem is one thing wrong with an inventory file. Its Error is
// "file:line: field: message" (field is omitted when the problem concerns
// the whole document, e.g. a YAML syntax error).
type Problem struct {
	File  string `json:"file"`
	Line  int    `json:"line"`
	Field string `json:"field,omitempty"`
	Msg   string `json:"message"`
}

func (p *Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteString(":" + strconv.Itoa(p.Line))
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Problems returns every *Problem joined into err (by errors.Join or
// wrapping), in order. Errors that are not Problems are returned as a
// Problem with only Msg set.
func Problems(err error) []*Problem {
	if err == nil {
		return nil
	}
	var out []*Problem
	var walk func(error)
	walk = func(e error) {
		if p, ok := e.(*Problem); ok {
			out = append(out, p)
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var p *Problem
		if errors.As(e, &p) {
			out = append(out, p)
			return
		}
		out = append(out, &Problem{Msg: e.Error()})
	}
	walk(err)
	return out
}

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

// maxNodes bounds the work of walking a document, so that alias bombs
// ("billion laughs") fail instead of exhausting memory.
const maxNodes = 100000

// Parse validates data, naming the file name in every problem. It returns
// the inventory, or nil and every problem found joined with errors.Join.
func Parse(name string, data []byte, opts Options) (*Inventory, error) {
	p := &parser{file: name, opts: opts}
	inv := p.parse(data)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return inv, nil
}

type parser struct {
	file  string
	opts  Options
	errs  []error
	nodes int
	over  bool
}

func (p *parser) errf(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &Problem{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// resolve follows aliases and counts nodes against maxNodes.
func (p *parser) resolve(n *yaml.Node) *yaml.Node {
	for depth := 0; n != nil && n.Kind == yaml.AliasNode; depth++ {
		if depth > 100 {
			return nil
		}
		n = n.Alias
	}
	p.nodes++
	if p.nodes > maxNodes {
		if !p.over {
			p.over = true
			p.errf(n, "", "document too large or too many aliases (more than %d nodes)", maxNodes)
		}
		return nil
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.DocumentNode:
		return "a document"
	}
	return "an alias"
}

// mapping walks a mapping node: it reports wrong kinds, duplicate keys and
// unknown fields, calls fields[key] for each known key, and returns the key
// nodes seen (for ordering and line numbers).
func (p *parser) mapping(n *yaml.Node, path string, fields map[string]func(string, *yaml.Node)) map[string]*yaml.Node {
	seen := map[string]*yaml.Node{}
	if n.Kind != yaml.MappingNode {
		p.errf(n, path, "want a mapping, got %s", kindName(n))
		return seen
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := p.resolve(n.Content[i])
		v := p.resolve(n.Content[i+1])
		if k == nil || v == nil {
			return seen
		}
		if k.Kind != yaml.ScalarNode {
			p.errf(k, path, "field names must be plain strings, got %s", kindName(k))
			continue
		}
		field := joinPath(path, k.Value)
		if prev, dup := seen[k.Value]; dup {
			p.errf(k, field, "duplicate field (first set on line %d)", prev.Line)
			continue
		}
		seen[k.Value] = k
		fn, ok := fields[k.Value]
		if !ok {
			p.errf(k, field, "unknown field")
			continue
		}
		fn(field, v)
	}
	return seen
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (p *parser) scalar(n *yaml.Node, field, want string) bool {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errf(n, field, "want %s, got %s", want, kindName(n))
		return false
	}
	return true
}

func (p *parser) str(n *yaml.Node, field string) (string, bool) {
	if !p.scalar(n, field, "a string") {
		return "", false
	}
	if n.Value == "" {
		p.errf(n, field, "must not be empty")
		return "", false
	}
	return n.Value, true
}

func (p *parser) integer(n *yaml.Node, field string) (int, bool) {
	if !p.scalar(n, field, "an integer") {
		return 0, false
	}
	var v int
	if n.Tag != "!!int" || n.Decode(&v) != nil {
		p.errf(n, field, "want an integer, got %q", n.Value)
		return 0, false
	}
	return v, true
}

// count decodes an integer that must be > 0.
func (p *parser) count(n *yaml.Node, field string) (int, bool) {
	v, ok := p.integer(n, field)
	if ok && v <= 0 {
		p.errf(n, field, "must be positive, got %d", v)
		return 0, false
	}
	return v, ok
}

// quota decodes an integer that must be >= 0.
func (p *parser) quota(n *yaml.Node, field string) (int, bool) {
	v, ok := p.integer(n, field)
	if ok && v < 0 {
		p.errf(n, field, "must not be negative, got %d", v)
		return 0, false
	}
	return v, ok
}

// rate decodes a number that must be > 0 and finite.
func (p *parser) rate(n *yaml.Node, field string) (float64, bool) {
	if !p.scalar(n, field, "a number") {
		return 0, false
	}
	var v float64
	if (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&v) != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		p.errf(n, field, "want a number, got %q", n.Value)
		return 0, false
	}
	if v <= 0 {
		p.errf(n, field, "must be positive, got %s", n.Value)
		return 0, false
	}
	return v, true
}

func (p *parser) boolean(n *yaml.Node, field string) (bool, bool) {
	if !p.scalar(n, field, "true or false") {
		return false, false
	}
	var v bool
	if n.Tag != "!!bool" || n.Decode(&v) != nil {
		p.errf(n, field, "want true or false, got %q", n.Value)
		return false, false
	}
	return v, true
}

func (p *parser) duration(n *yaml.Node, field string) (time.Duration, bool) {
	if !p.scalar(n, field, `a duration like "10s"`) {
		return 0, false
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		p.errf(n, field, `want a duration like "10s", got %q`, n.Value)
		return 0, false
	}
	if d <= 0 {
		p.errf(n, field, "must be positive, got %s", n.Value)
		return 0, false
	}
	return d, true
}

func (p *parser) labels(n *yaml.Node, field string) map[string]string {
	if n.Kind != yaml.MappingNode {
		p.errf(n, field, "want a mapping of strings, got %s", kindName(n))
		return nil
	}
	out := map[string]string{}
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := p.resolve(n.Content[i])
		v := p.resolve(n.Content[i+1])
		if k == nil || v == nil {
			return out
		}
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			p.errf(k, field, "label names must be non-empty strings, got %s", kindName(k))
			continue
		}
		lf := field + "." + k.Value
		if l, dup := lines[k.Value]; dup {
			p.errf(k, lf, "duplicate label (first set on line %d)", l)
			continue
		}
		lines[k.Value] = k.Line
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			p.errf(v, lf, "want a string, got %s", kindName(v))
			continue
		}
		out[k.Value] = v.Value
	}
	return out
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
			if s, ok := p.str(v, f); ok {
				*dst = &s
			}
		}
	}
	setC := func(dst **int) func(string, *yaml.Node) {
		return func(f string, v *yaml.Node) {
			if i, ok := p.count(v, f); ok {
				*dst = &i
			}
		}
	}
	setR := func(dst **float64) func(string, *yaml.Node) {
		return func(f string, v *yaml.Node) {
			if r, ok := p.rate(v, f); ok {
				*dst = &r
			}
		}
	}
	fields := map[string]func(string, *yaml.Node){
		"user":          setS(&h.user),
		"identity_file": setS(&h.identity),
		"gpu_model":     setS(&h.gpuModel),
		"port": func(f string, v *yaml.Node) {
			if i, ok := p.count(v, f); ok {
				if i > 65535 {
					p.errf(v, f, "must be a TCP port (1-65535), got %d", i)
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
			if b, ok := p.boolean(v, f); ok {
				h.sshAgent = &b
			}
		},
		"labels": func(f string, v *yaml.Node) { h.labels = p.labels(v, f) },
	}
	if isServer {
		fields["name"] = setS(&h.name)
		fields["address"] = setS(&h.address)
		fields["rack"] = setS(&h.rack)
	}
	seen := p.mapping(n, path, fields)
	for k, kn := range seen {
		h.lines[k] = kn.Line
	}
	return h
}

func (p *parser) list(n *yaml.Node, field string, each func(i int, path string, item *yaml.Node)) {
	if n.Kind != yaml.SequenceNode {
		p.errf(n, field, "want a list, got %s", kindName(n))
		return
	}
	for i, item := range n.Content {
		item = p.resolve(item)
		if item == nil {
			return
		}
		each(i, fmt.Sprintf("%s[%d]", field, i), item)
	}
}

func (p *parser) parse(data []byte) *Inventory {
	var doc yaml.Node
	syntax := func(err error) {
		msg := err.Error()
		line := 0
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		} else {
			msg = strings.TrimPrefix(msg, "yaml: ")
		}
		p.errs = append(p.errs, &Problem{File: p.file, Line: line, Msg: msg})
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		syntax(err)
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.errf(&extra, "", "more than one YAML document: an inventory is one document")
		return nil
	} else if err != io.EOF {
		syntax(err)
		return nil
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		p.errf(nil, "", "empty inventory: want a mapping starting with \"version: 1\"")
		return nil
	}
	root := p.resolve(doc.Content[0])
	if root == nil {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		p.errf(root, "", "want a mapping starting with \"version: 1\", got %s", kindName(root))
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
	)
	seen := p.mapping(root, "", map[string]func(string, *yaml.Node){
		"version": func(f string, v *yaml.Node) {
			if i, ok := p.integer(v, f); ok {
				if i != Version {
					p.errf(v, f, "unsupported version %d (this replan reads version %d)", i, Version)
				}
			}
		},
		"defaults": func(f string, v *yaml.Node) { defaults = p.host(v, f, false) },
		"racks": func(f string, v *yaml.Node) {
			p.list(v, f, func(i int, path string, item *yaml.Node) {
				var r Rack
				got := p.mapping(item, path, map[string]func(string, *yaml.Node){
					"name":       func(f string, v *yaml.Node) { r.Name, _ = p.str(v, f) },
					"spine_gbps": func(f string, v *yaml.Node) { r.SpineGBps, _ = p.rate(v, f) },
				})
				if item.Kind == yaml.MappingNode {
					for _, req := range []string{"name", "spine_gbps"} {
						if got[req] == nil {
							p.errf(item, joinPath(path, req), "missing required field")
						}
					}
				}
				racks = append(racks, r)
				rackNodes = append(rackNodes, item)
			})
		},
		"servers": func(f string, v *yaml.Node) {
			p.list(v, f, func(i int, path string, item *yaml.Node) {
				servers = append(servers, p.host(item, path, true))
				serverPath = append(serverPath, path)
			})
		},
		"tenants": func(f string, v *yaml.Node) {
			p.list(v, f, func(i int, path string, item *yaml.Node) {
				var t Tenant
				got := p.mapping(item, path, map[string]func(string, *yaml.Node){
					"name":            func(f string, v *yaml.Node) { t.Name, _ = p.str(v, f) },
					"gpu_quota":       func(f string, v *yaml.Node) { t.GPUQuota, _ = p.quota(v, f) },
					"cpu_quota":       func(f string, v *yaml.Node) { t.CPUQuota, _ = p.quota(v, f) },
					"memory_quota_gb": func(f string, v *yaml.Node) { t.MemoryQuotaGB, _ = p.quota(v, f) },
				})
				if item.Kind == yaml.MappingNode && got["name"] == nil {
					p.errf(item, joinPath(path, "name"), "missing required field")
				}
				tenants = append(tenants, t)
				tenantNode = append(tenantNode, item)
				tenantPath = append(tenantPath, path)
			})
		},
		"ssh": func(f string, v *yaml.Node) {
			p.mapping(v, f, map[string]func(string, *yaml.Node){
				"known_hosts": func(f string, v *yaml.Node) {
					if s, ok := p.str(v, f); ok {
						sshOpts.KnownHosts = s
						knownHostsNode = v
					}
				},
				"connect_timeout": func(f string, v *yaml.Node) {
					if d, ok := p.duration(v, f); ok {
						sshOpts.ConnectTimeout = d
					}
				},
				"keepalive": func(f string, v *yaml.Node) {
					if d, ok := p.duration(v, f); ok {
						sshOpts.Keepalive = d
					}
				},
				"max_sessions": func(f string, v *yaml.Node) {
					if i, ok := p.count(v, f); ok {
						sshOpts.MaxSessions = i
					}
				},
				"jump_host": func(f string, v *yaml.Node) {
					s, ok := p.str(v, f)
					if !ok {
						return
					}
					if strings.Contains(s, ":") {
						if _, port, err := net.SplitHostPort(s); err != nil || !validPort(port) {
							p.errf(v, f, "want host or host:port, got %q", s)
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
		p.errf(root, "version", "missing required field (want \"version: 1\" as the first line)")
	} else if len(root.Content) > 0 && root.Content[0] != seen["version"] {
		p.errf(seen["version"], "version", "must be the first field")
	}
	if seen["servers"] == nil {
		p.errf(root, "servers", "missing required field")
	}
	if seen["racks"] == nil {
		p.errf(root, "racks", "missing required field")
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
			p.errf(n, field, "%v", err)
			return ""
		}
		if p.opts.SkipIdentityCheck {
			return path
		}
		if fi, err := stat(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				p.errf(n, field, "identity file %s does not exist", path)
			} else {
				p.errf(n, field, "identity file %s: %v", path, err)
			}
			return ""
		} else if fi != nil && fi.IsDir() {
			p.errf(n, field, "identity file %s is a directory", path)
			return ""
		}
		return path
	}
	if kh, err := expand(inv.SSH.KnownHosts); err != nil {
		p.errf(knownHostsNode, "ssh.known_hosts", "%v", err)
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
			p.errf(rackNodes[i], fmt.Sprintf("racks[%d].name", i), "duplicate rack %q (also racks[%d])", r.Name, j)
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
			p.errf(h.node, path+"."+field, "missing required field (set it here or in defaults)")
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
		if len(d.Labels) > 0 || len(h.labels) > 0 {
			s.Labels = map[string]string{}
			for k, v := range d.Labels {
				s.Labels[k] = v
			}
			for k, v := range h.labels {
				s.Labels[k] = v
			}
		}
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
				p.errf(h.node, path+"."+req.field, "missing required field")
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
			p.errf(h.node, path+".identity_file", "missing: set identity_file or ssh_agent: true (here or in defaults)")
		case !s.SSHAgent:
			p.errf(line("ssh_agent"), path+".ssh_agent", "ssh_agent is false and no identity_file is set")
		}
		if s.Name != "" {
			if prev, dup := names[s.Name]; dup {
				p.errf(line("name"), path+".name", "duplicate server name %q (also %s)", s.Name, prev)
			} else {
				names[s.Name] = path
			}
		}
		if s.Address != "" && s.Port != 0 {
			key := s.Addr()
			if prev, dup := addrs[key]; dup {
				p.errf(line("address"), path+".address", "duplicate address %s (also %s)", key, prev)
			} else {
				addrs[key] = path
			}
		}
		if _, ok := rackIdx[s.Rack]; s.Rack != "" && !ok && seen["racks"] != nil {
			p.errf(line("rack"), path+".rack", "unknown rack %q", s.Rack)
		}
		inv.Servers = append(inv.Servers, s)
	}
	if seen["servers"] != nil && len(servers) == 0 && len(p.errs) == 0 {
		p.errf(seen["servers"], "servers", "must list at least one server")
	}

	// Tenants: unique names, quotas within the cluster (only checked when
	// everything before is valid, as otherwise the totals are wrong).
	tot := inv.Totals()
	checkQuota := len(p.errs) == 0
	tenantNames := map[string]string{}
	for i, t := range tenants {
		path := tenantPath[i]
		if t.Name != "" {
			if prev, dup := tenantNames[t.Name]; dup {
				p.errf(tenantNode[i], path+".name", "duplicate tenant %q (also %s)", t.Name, prev)
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
				p.errf(fieldNode(tenantNode[i], q.field), path+"."+q.field, "quota %d exceeds the cluster's %d %s", q.quota, q.max, q.unit)
			}
		}
	}
	inv.Tenants = tenants
	if len(p.errs) > 0 {
		return nil
	}
	return inv
}

// fieldNode returns the key node of field in mapping n, or n.
func fieldNode(n *yaml.Node, field string) *yaml.Node {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == field {
				return n.Content[i]
			}
		}
	}
	return n
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
