package control

// Servers of the simulated cluster that reboot: the agent is gone (SSH
// would answer), its jobs with it, until the daemon redeploys it.

import (
	"context"
	"fmt"
)

// simAgents is the simulated cluster's agents that are gone; guarded by
// the executor's mu.
type simAgents struct {
	gone      map[string]bool // the agent does not answer; SSH does
	fail      map[string]int  // redeploys left to fail
	redeploys map[string]int  // redeploys tried
	boots     map[string]int  // reboots, for the boot id
}

// bootID is server's boot id as its agent would report it.
func (a *simAgents) bootID(server string) string {
	return fmt.Sprintf("%s-boot-%d", server, a.boots[server])
}

// Reboot reboots server: its boot id changes and its jobs' processes
// die. With agentBack its agent is started again by the server's init
// (it answers at once, and reports the jobs exited: "server rebooted");
// without, the agent is gone, as a reboot leaves it when nothing starts
// it: the server misses heartbeats until a Redeploy succeeds.
func (e *SimExecutor) Reboot(server string, agentBack bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.agents.boots == nil {
		e.agents.boots = map[string]int{}
	}
	e.agents.boots[server]++
	for _, j := range e.running {
		for _, s := range j.l.Servers {
			if s.Name == server && j.exit == nil {
				code := 137
				j.frozen, j.hung, j.exit = e.progress(j), true, &code
			}
		}
	}
	if !agentBack {
		if e.agents.gone == nil {
			e.agents.gone = map[string]bool{}
		}
		e.agents.gone[server] = true
	}
}

// FailRedeploys makes the next n redeploys on server fail.
func (e *SimExecutor) FailRedeploys(server string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.agents.fail == nil {
		e.agents.fail = map[string]int{}
	}
	e.agents.fail[server] = n
}

// Redeploys is how many redeploys were tried on server.
func (e *SimExecutor) Redeploys(server string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.agents.redeploys[server]
}

var _ AgentRedeployer = (*SimExecutor)(nil)

// Redeploy implements AgentRedeployer: a server that is down does not
// answer SSH; otherwise its agent starts ("deployed") unless a failure
// was asked for (FailRedeploys).
func (e *SimExecutor) Redeploy(ctx context.Context, server string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.down[server] {
		return "", fmt.Errorf("redeploy on %s: %w: simulated failure", server, ErrSSHDown)
	}
	if e.agents.redeploys == nil {
		e.agents.redeploys = map[string]int{}
	}
	e.agents.redeploys[server]++
	if e.agents.fail[server] > 0 {
		e.agents.fail[server]--
		return "failed", fmt.Errorf("deploy agent to %s: simulated: the agent did not answer within 30s", server)
	}
	if !e.agents.gone[server] {
		return "up to date", nil
	}
	delete(e.agents.gone, server)
	return "deployed", nil
}
