package control

// The SSH executor's redeploy of a server's agent (AgentRedeployer): a
// server that rebooted answers SSH, but its agent and the agent's state
// are gone until something starts it again.

import (
	"context"
	"fmt"

	"github.com/replan/replan/cluster"
)

var _ AgentRedeployer = (*SSHExecutor)(nil)

// Redeploy implements AgentRedeployer: when a command runs on the server
// over SSH, it starts the agent there through the deploy path
// (fleet.Deploy with SSHOptions.Deploy, restarting an agent that runs but
// does not answer with its own flags), then runs the health check
// (Check). It returns the deploy's status ("deployed", "restarted", "up
// to date", ...). SSH that does not answer is ErrSSHDown; no Deploy
// options, ErrRedeployOff.
func (e *SSHExecutor) Redeploy(ctx context.Context, server string) (string, error) {
	if e.opt.Deploy == nil {
		return "", ErrRedeployOff
	}
	s, err := e.server(server)
	if err != nil {
		return "", err
	}
	h, err := e.host(server)
	if err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, e.opt.CallTimeout)
	_, err = e.fl.Pool().Output(cctx, h, "true")
	cancel()
	if err != nil {
		return "", fmt.Errorf("redeploy on %s: run `true` over SSH: %w: %w", server, ErrSSHDown, err)
	}
	opts := *e.opt.Deploy
	opts.KeepFlags = true
	res, err := e.fl.Deploy(ctx, []cluster.Server{s}, opts)
	if err != nil {
		return "", fmt.Errorf("redeploy on %s: %w", server, err)
	}
	if len(res) != 1 {
		return "", fmt.Errorf("redeploy on %s: %d deploy results", server, len(res))
	}
	if res[0].Err != nil {
		return res[0].Status, res[0].Err
	}
	e.log.Info("redeploy: agent started", "server", server, "status", res[0].Status, "pid", res[0].PID)
	if err := e.Check(ctx, server); err != nil {
		return res[0].Status, err
	}
	return res[0].Status, nil
}
