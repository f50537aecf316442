package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	xssh "golang.org/x/crypto/ssh"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/cluster"
	"github.com/replan/replan/ssh"
)

// UsedMemoryBytes is the GPU memory above which a GPU without processes
// still counts as used (a driver's own footprint stays below it).
const UsedMemoryBytes = 256 << 20

// DefaultHealthWindow is how far back health events count as recent.
const DefaultHealthWindow = time.Hour

// Node states (Node.State).
const (
	NodeUp          = "up"          // SSH and the agent answer
	NodeNoAgent     = "no agent"    // SSH works, the agent does not answer
	NodeUnreachable = "unreachable" // SSH fails
)

// NodesOptions tune Nodes.
type NodesOptions struct {
	// Timeout bounds the work on one server; default 15s.
	Timeout time.Duration
	// HealthWindow is how far back health events count; default
	// DefaultHealthWindow.
	HealthWindow time.Duration
	// Now is the time health events are compared with; zero means
	// time.Now().
	Now time.Time
	// Progress, when set, sees every finished server.
	Progress ssh.Progress
}

// Node is one server's state. Its JSON form is the stable schema of
// `replan nodes --direct --json` (docs/agent.md).
type Node struct {
	Server string `json:"server"`
	Addr   string `json:"addr"`
	Rack   string `json:"rack"`
	// State is "up", "no agent" or "unreachable".
	State string `json:"state"`
	// Reachable is true when SSH works (State "up" or "no agent").
	Reachable bool `json:"reachable"`
	// AgentUp is true when the agent answered.
	AgentUp bool `json:"agent_up"`
	// Error says what failed, for any state but "up".
	Error        string  `json:"error,omitempty"`
	AgentVersion string  `json:"agent_version,omitempty"`
	Hostname     string  `json:"hostname,omitempty"`
	UptimeS      float64 `json:"agent_uptime_s,omitempty"`
	GPUBackend   string  `json:"gpu_backend,omitempty"`
	// NVML is whether NVML is in use and, if not, why.
	NVML agent.NVMLStatus `json:"nvml"`
	// GPUs counts the GPUs the agent sees; GPUsUsed those with processes
	// or more than UsedMemoryBytes of memory in use.
	GPUs     int    `json:"gpus"`
	GPUsUsed int    `json:"gpus_used"`
	GPUModel string `json:"gpu_model,omitempty"`
	// Healthy is false when there were Xid or ECC events in the window.
	Healthy bool `json:"healthy"`
	// Health holds the recent Xid/ECC events, oldest first.
	Health []agent.HealthEvent `json:"health"`
	// ProcessesRunning counts supervised processes still running;
	// Processes names them.
	ProcessesRunning int      `json:"processes_running"`
	Processes        []string `json:"processes"`
	// Err is Error as an error value.
	Err error `json:"-"`
}

// GPUUsed reports whether a GPU counts as used: it has compute processes
// or more than UsedMemoryBytes of memory in use.
func GPUUsed(g agent.GPU) bool {
	return len(g.Processes) > 0 || g.MemoryUsedBytes > UsedMemoryBytes
}

// Nodes asks every server's agent for its state, at most
// Options.Concurrency at once. A server that cannot be reached is a Node
// with its error, never a failure of the call; results are in input order.
func (f *Fleet) Nodes(ctx context.Context, servers []cluster.Server, opts NodesOptions) []Node {
	if opts.Timeout <= 0 {
		opts.Timeout = 15 * time.Second
	}
	if opts.HealthWindow <= 0 {
		opts.HealthWindow = DefaultHealthWindow
	}
	hosts := make([]ssh.Host, len(servers))
	index := map[string]int{}
	for i, s := range servers {
		hosts[i] = ssh.HostFromServer(s)
		index[hosts[i].Name] = i
	}
	nodes := make([]Node, len(servers))
	for i, s := range servers {
		nodes[i] = Node{Server: s.Name, Addr: s.Addr(), Rack: s.Rack, State: NodeUnreachable, Health: []agent.HealthEvent{}, Processes: []string{}}
	}
	ssh.ForEach(ctx, hosts, f.limit, opts.Progress, func(ctx context.Context, h ssh.Host) error {
		i := index[h.Name]
		ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
		f.node(ctx, servers[i], opts, &nodes[i])
		return nodes[i].Err
	})
	for i := range nodes {
		if nodes[i].Err == nil && nodes[i].State != NodeUp {
			nodes[i].Err = errors.New("not queried: " + fmt.Sprint(ctx.Err()))
			nodes[i].Error = nodes[i].Err.Error()
		}
	}
	return nodes
}

func (f *Fleet) node(ctx context.Context, s cluster.Server, opts NodesOptions, n *Node) {
	fail := func(state string, err error) {
		n.State, n.Err, n.Error = state, err, err.Error()
		n.Reachable = state != NodeUnreachable
		f.log.Debug("node", logServer, s.Name, "state", state, "err", err)
	}
	h := ssh.HostFromServer(s)
	if _, err := f.pool.Client(ctx, h); err != nil {
		fail(NodeUnreachable, err)
		return
	}
	l, err := f.Layout(ctx, s)
	if err != nil {
		fail(NodeUnreachable, err)
		return
	}
	c := f.Client(s, l)
	st, err := c.Status(ctx)
	if err != nil {
		// The pooled connection may have died since it was checked: tell
		// a dead server from a missing agent by connecting again.
		var oc *xssh.OpenChannelError
		if !errors.As(err, &oc) {
			if _, cerr := f.pool.Client(ctx, h); cerr != nil {
				fail(NodeUnreachable, cerr)
				return
			}
		}
		fail(NodeNoAgent, fmt.Errorf("agent at %s: %w", l.Socket, err))
		return
	}
	n.Reachable, n.AgentUp = true, true
	n.AgentVersion, n.Hostname, n.UptimeS = st.Version, st.Hostname, st.UptimeSec
	n.GPUBackend, n.NVML, n.GPUs = st.GPUBackend, st.NVML, st.GPUCount
	snap, err := c.GPUs(ctx)
	if err != nil {
		fail(NodeNoAgent, fmt.Errorf("agent GPUs: %w", err))
		return
	}
	procs, err := c.Processes(ctx)
	if err != nil {
		fail(NodeNoAgent, fmt.Errorf("agent processes: %w", err))
		return
	}
	summarise(n, snap, procs, opts)
	n.State = NodeUp
}

// summarise fills the GPU, health and process fields from the agent's
// answers.
func summarise(n *Node, snap agent.GPUSnapshot, procs []agent.ProcessInfo, opts NodesOptions) {
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	if len(snap.GPUs) > 0 {
		n.GPUs = len(snap.GPUs)
		n.GPUModel = snap.GPUs[0].Name
	}
	n.GPUsUsed = 0
	for _, g := range snap.GPUs {
		if GPUUsed(g) {
			n.GPUsUsed++
		}
	}
	n.Health = []agent.HealthEvent{}
	for _, e := range snap.Health {
		if now.Sub(e.Time) <= opts.HealthWindow {
			n.Health = append(n.Health, e)
		}
	}
	n.Healthy = len(n.Health) == 0
	n.Processes = []string{}
	for _, p := range procs {
		if p.State == agent.StateRunning {
			n.Processes = append(n.Processes, p.Spec.ID)
		}
	}
	n.ProcessesRunning = len(n.Processes)
}
