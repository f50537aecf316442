// Package fleet runs operations over the servers of an inventory: it
// deploys the agent to them (Deploy) and reports their state (Nodes).
//
// Everything goes through one ssh.Pool: commands and uploads over SSH
// sessions, and the agent's API over the SSH connection's
// direct-streamlocal channel to the agent's unix socket. The remote layout
// under the agent directory (default ~/.replan, see Layout) is:
//
//	DIR/bin/replan-agent   the agent binary (uploaded atomically, sha256 verified)
//	DIR/agent.sock         the agent's API socket
//	DIR/agent/             the agent's state (process records and logs)
//	DIR/agent.log          the agent's own log
//	DIR/agent.pid          the running agent's PID
//
// The package knows servers and agents, not jobs or schedules; it does not
// import the TUI, sched or perf. Every function that does I/O takes a
// context first; logs go to the injected *slog.Logger.
package fleet
