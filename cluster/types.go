package cluster

import (
	"net"
	"strconv"
	"time"
)

// Version is the only inventory schema version this build understands.
const Version = 1

// Inventory is a validated inventory.yaml: every server has its defaults
// applied, paths have ~ expanded, and cross references (racks) resolve.
type Inventory struct {
	Version  int
	Defaults Defaults
	Racks    []Rack
	Servers  []Server
	Tenants  []Tenant
	SSH      SSHOptions
	// Admins may do everything through the daemon's API (drain, undrain,
	// act on every job): Unix user names.
	Admins []string
}

// Defaults are the values every server inherits unless it sets its own.
// A zero value means "not set".
type Defaults struct {
	User         string
	Port         int
	IdentityFile string // ~ expanded; empty when not set
	SSHAgent     bool
	GPUModel     string
	GPUs         int
	GPUMemoryGB  int
	CPUCores     int
	HostMemoryGB int
	NVLinkGBps   float64 // GB/s (bytes, not bits)
	NICGBps      float64 // GB/s (bytes, not bits)
	Labels       map[string]string
}

// Rack groups servers under one top-of-rack switch.
type Rack struct {
	Name string
	// SpineGBps is the rack's uplink into the spine in GB/s: the bandwidth
	// that traffic leaving the rack shares.
	SpineGBps float64
	// Labels are the rack's labels: every server of the rack carries them
	// (its own, and the defaults', merged over them; labels.go).
	Labels map[string]string
}

// Server is one GPU server with its defaults applied.
type Server struct {
	Name         string
	Address      string
	Port         int
	User         string
	IdentityFile string // ~ expanded, absolute or relative to the inventory's directory; empty when SSHAgent
	SSHAgent     bool   // authenticate with the keys of $SSH_AUTH_SOCK
	Rack         string
	GPUModel     string
	GPUs         int
	GPUMemoryGB  int
	CPUCores     int
	HostMemoryGB int
	NVLinkGBps   float64 // GB/s between GPUs inside the server
	NICGBps      float64 // GB/s RDMA from the server into its rack
	// Labels are the server's labels (node features): the defaults',
	// its rack's and its own merged, a later value winning. A label given
	// in list form has the value "". A job spec's constraint.labels
	// requires them.
	Labels map[string]string
}

// Addr is the server's SSH address as host:port.
func (s Server) Addr() string {
	return net.JoinHostPort(s.Address, strconv.Itoa(s.Port))
}

// Tenant is a group of users whose guaranteed jobs share a quota.
type Tenant struct {
	Name          string
	GPUQuota      int
	CPUQuota      int
	MemoryQuotaGB int
	// Users may submit under the tenant and act on their own jobs; Admins
	// may also act on all of the tenant's jobs (Unix user names). With no
	// users listed anywhere the daemon is single-user.
	Users  []string
	Admins []string
	// RunAs is the Unix user the tenant's processes should run as on the
	// servers ("": the agent's own user).
	RunAs string
	// TimeLimitDefault is the time limit of the tenant's jobs whose spec
	// sets none; TimeLimitMax the longest a spec may set (0: no limit).
	TimeLimitDefault time.Duration
	TimeLimitMax     time.Duration
}

// SSHOptions configure how replan reaches servers.
type SSHOptions struct {
	KnownHosts     string        // ~ expanded
	ConnectTimeout time.Duration // TCP connect + SSH handshake deadline
	Keepalive      time.Duration // interval of keepalive@openssh.com requests
	MaxSessions    int           // concurrent sessions per server
	JumpHost       string        // optional host:port of a bastion; empty when none
	// RemoteDir is the agent's directory on every server, as deploy,
	// nodes --direct and the daemon use it ("~" and "{server}" allowed);
	// empty: fleet.DefaultRemoteDir. A --remote-dir flag overrides it.
	RemoteDir string
}

// Defaults for the ssh block when a field is absent.
const (
	DefaultKnownHosts     = "~/.config/replan/known_hosts"
	DefaultConnectTimeout = 10 * time.Second
	DefaultKeepalive      = 30 * time.Second
	DefaultMaxSessions    = 8
	DefaultPort           = 22
)

// Totals is the size of the cluster: the sum over all servers.
type Totals struct {
	GPUs         int
	CPUCores     int
	HostMemoryGB int
}

// Totals sums GPUs, CPU cores and host memory over every server.
func (inv *Inventory) Totals() Totals {
	var t Totals
	for _, s := range inv.Servers {
		t.GPUs += s.GPUs
		t.CPUCores += s.CPUCores
		t.HostMemoryGB += s.HostMemoryGB
	}
	return t
}

// Server returns the server with the given name.
func (inv *Inventory) Server(name string) (Server, bool) {
	for _, s := range inv.Servers {
		if s.Name == name {
			return s, true
		}
	}
	return Server{}, false
}

// Rack returns the rack with the given name.
func (inv *Inventory) Rack(name string) (Rack, bool) {
	for _, r := range inv.Racks {
		if r.Name == name {
			return r, true
		}
	}
	return Rack{}, false
}
