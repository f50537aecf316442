package fleet

import (
	"fmt"
	"os"
	"path/filepath"
)

// AgentBinaryName is the agent's file name, locally beside replan and on
// every server under DIR/bin.
const AgentBinaryName = "replan-agent"

// DefaultAgentBinary picks the local binary to deploy when none is given:
// replan-agent beside the running executable (what `make build` produces:
// bin/replan and bin/replan-agent), else the running replan binary itself,
// which serves the agent as `replan agent serve`. It also says which one
// it chose and why.
func DefaultAgentBinary() (path, why string, err error) {
	self, err := os.Executable()
	if err != nil {
		return "", "", fmt.Errorf("find the running executable: %w", err)
	}
	if r, err := filepath.EvalSymlinks(self); err == nil {
		self = r
	}
	beside := filepath.Join(filepath.Dir(self), AgentBinaryName)
	if st, err := os.Stat(beside); err == nil && st.Mode().IsRegular() && beside != self {
		return beside, AgentBinaryName + " beside " + filepath.Base(self), nil
	}
	return self, "no " + AgentBinaryName + " beside " + self + ": deploying replan itself (replan agent serve)", nil
}
