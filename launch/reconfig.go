package launch

import (
	"errors"
	"fmt"
	"path"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

// StepKind names one step of a reconfiguration.
type StepKind string

// The steps, in the order Reconfigure emits them.
const (
	// StepCheckpoint signals every process of the job to save a
	// checkpoint and exit (SIGTERM: Megatron saves on it with
	// --exit-signal-handler; DeepSpeed entrypoints launched by replan do
	// the same by contract, see docs/jobspec.md).
	StepCheckpoint StepKind = "checkpoint"
	// StepWaitCheckpoint waits until the checkpoint marker file names an
	// iteration at least Step.Iteration.
	StepWaitCheckpoint StepKind = "wait-checkpoint"
	// StepStop stops whatever is left of the job on every server (SIGTERM
	// to the process group, then SIGKILL after the grace) and confirms it
	// exited.
	StepStop StepKind = "stop"
	// StepConvert runs a checkpoint conversion (DeepSpeed's ds_to_universal
	// when the DP size, ZeRO stage, TP or PP change) on the master server.
	StepConvert StepKind = "convert"
	// StepLaunch starts the new plan from the checkpoint.
	StepLaunch StepKind = "launch"
	// StepVerify waits for the training logs to report an iteration past
	// Step.Iteration: progress continued, nothing was lost.
	StepVerify StepKind = "verify"
)

// Step is one action of a reconfiguration.
type Step struct {
	Kind      StepKind  `json:"kind"`
	Servers   []string  `json:"servers,omitempty"`
	Signal    string    `json:"signal,omitempty"`
	Path      string    `json:"path,omitempty"`      // marker file (wait-checkpoint)
	Iteration int       `json:"iteration,omitempty"` // wait-checkpoint: at least; verify: beyond
	Argv      []string  `json:"argv,omitempty"`      // convert
	Launch    *Rendered `json:"launch,omitempty"`    // launch
	Detail    string    `json:"detail"`
}

// CheckpointMarker is the file whose content advances when a checkpoint is
// complete: Megatron's latest_checkpointed_iteration.txt, DeepSpeed's
// "latest" tag file.
func CheckpointMarker(j *jobspec.Spec) string {
	if j.Framework == jobspec.Megatron {
		return path.Join(j.CheckpointDir, "latest_checkpointed_iteration.txt")
	}
	return path.Join(j.CheckpointDir, "latest")
}

// NeedsUniversal reports whether moving a DeepSpeed job from old to next
// needs its checkpoint converted to the universal format: the DP size, the
// ZeRO stage or the model-parallel sizes change.
func NeedsUniversal(old, next Input) bool {
	if old.Job.Framework != jobspec.DeepSpeed {
		return false
	}
	a, b := old.Plan, next.Plan
	return a.DP != b.DP || a.ZeRO != b.ZeRO || a.TP != b.TP || a.PP != b.PP
}

// Reconfigure is the sequence that moves a running job from old to next
// without losing progress: checkpoint, wait for the marker to reach
// lastIteration, stop and confirm, convert when needed, relaunch from the
// checkpoint with the new plan, verify the iteration count continued. The
// global batch never changes: a next plan with another batch is refused.
func Reconfigure(old, next Input, lastIteration int) ([]Step, error) {
	if old.Job == nil || next.Job == nil || old.Job.Name != next.Job.Name {
		return nil, errors.New("reconfigure: old and next must be the same job")
	}
	if ob, nb := old.Plan.GlobalBatch(), next.Plan.GlobalBatch(); ob != nb || nb != next.Job.GlobalBatch {
		return nil, fmt.Errorf("reconfigure %s: global batch must stay %d, next plan has %d", next.Job.Name, next.Job.GlobalBatch, nb)
	}
	next.Resume = true
	next.Universal = NeedsUniversal(old, next)
	if next.Attempt <= old.Attempt {
		next.Attempt = old.Attempt + 1
	}
	r, err := Render(next)
	if err != nil {
		return nil, err
	}
	names := func(in Input) []string {
		var s []string
		for _, sv := range in.Servers {
			s = append(s, sv.Name)
		}
		return s
	}
	j := next.Job
	marker := CheckpointMarker(j)
	steps := []Step{
		{Kind: StepCheckpoint, Servers: names(old), Signal: "SIGTERM", Detail: "ask every rank to save a checkpoint and exit"},
		{Kind: StepWaitCheckpoint, Servers: names(old)[:1], Path: marker, Iteration: lastIteration, Detail: fmt.Sprintf("wait until %s reaches iteration %d", marker, lastIteration)},
		{Kind: StepStop, Servers: names(old), Detail: "stop what is left and confirm every process exited"},
	}
	if next.Universal {
		steps = append(steps, ConvertStep(j, old.Plan, next.Plan, names(old)[:1]))
	}
	steps = append(steps,
		Step{Kind: StepLaunch, Servers: names(next), Launch: &r, Detail: fmt.Sprintf("relaunch as %s from the checkpoint", next.Plan)},
		Step{Kind: StepVerify, Servers: names(next)[:1], Iteration: lastIteration, Detail: fmt.Sprintf("the logs must report an iteration beyond %d", lastIteration)},
	)
	return steps, nil
}

// ConvertStep is the checkpoint conversion a DeepSpeed job needs before it
// resumes with plan to from a checkpoint written with plan from (see
// NeedsUniversal), to run on servers[0].
func ConvertStep(j *jobspec.Spec, from, to perf.Plan, servers []string) Step {
	in := path.Join(j.CheckpointDir, "${TAG}")
	return Step{Kind: StepConvert, Servers: servers,
		Argv:   []string{"python", "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder", in, "--output_folder", in + "_universal"},
		Detail: fmt.Sprintf("DP %d→%d, ZeRO %d→%d, TP %d→%d, PP %d→%d: convert to a universal checkpoint (${TAG} is the content of %s)", from.DP, to.DP, from.ZeRO, to.ZeRO, from.TP, to.TP, from.PP, to.PP, CheckpointMarker(j))}
}
