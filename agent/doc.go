// Package agent is replan's per-server agent. One agent runs on every GPU
// server; the manager reaches it only through SSH, by forwarding to the
// agent's unix socket (direct-streamlocal), so the agent never opens a TCP
// port.
//
// The agent does four things and keeps no state tied to a connection, so it
// keeps working while the manager is away:
//
//   - GPU state: a [GPUBackend] (real NVML behind the "nvml" build tag, or
//     the pure-Go [FakeBackend]) is sampled at an interval by a [Sampler],
//     which keeps the latest state and recent health (Xid, ECC) events.
//   - Process supervision: a [Supervisor] starts training commands in their
//     own session with CPU binding, an optional cgroup v2 memory limit and
//     size-rotated log files, records each one on disk and re-adopts the ones
//     still running when the agent restarts.
//   - Throughput: each supervised process's log is tailed and parsed by
//     package logparse into samples.
//   - API: small HTTP/JSON over the unix socket ([Agent.Handler]); [Client] is
//     the Go side the manager uses, with a dial function so it can go
//     through SSH. Besides supervised processes it runs short commands to
//     their end on behalf of a job ([RunCommand], POST /v1/run: a marker
//     read, launch files, a checkpoint conversion), as the job's run_as user
//     with its environment as the command's environment.
//
// The agent must stay small: it does not link the TUI, gonum, SQLite, nor
// replan's perf, sched, control or tui packages (internal/layers checks).
package agent
