package sim_test

import (
	"context"
	"strings"
	"testing"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// TestTPLargerThanAServerRefusedUpFront is issue 29's last defect: with
// --gpus-per-server 4 a job asking for a TP-8 plan can never start under a
// policy that runs the user's plan (a TP group never spans servers), and
// 7 policies ended with it never finished. The simulator refuses it before
// the run, naming the trace line, the job and the server size, as the
// daemon's admission refuses the plan; with 8-GPU servers it runs.
func TestTPLargerThanAServerRefusedUpFront(t *testing.T) {
	trace := []dataset.WorkloadJob{
		{Line: 2, Name: "small", Application: "bert", GPUs: 4, CPUs: 16, ExecPlan: "114", Steps: 50},
		{Line: 3, Name: "tp8", Submit: 10, Application: "llama7b", GPUs: 16, CPUs: 64, ExecPlan: "182", Steps: 20},
	}
	models := sim.DefaultModels(perf.A800)
	for _, name := range sched.Names() {
		p, _ := sched.New(name)
		events := 0
		_, err := sim.Run(context.Background(), trace, models, p, sim.Config{Servers: 8, GPUsPerServer: 4, CPUsPerServer: 48,
			OnEvent: func(sim.Event) { events++ }})
		if err == nil || !strings.Contains(err.Error(), "trace:3") || !strings.Contains(err.Error(), "TP 8") || !strings.Contains(err.Error(), "4 GPUs") {
			t.Errorf("%s: want trace:3 refused for TP 8 on servers of 4 GPUs, got %v", name, err)
		}
		if events > 0 {
			t.Errorf("%s: %d events before the refusal", name, events)
		}
	}
	p, _ := sched.New("static")
	r, err := sim.Run(context.Background(), trace, models, p, sim.Config{Servers: 4})
	if err != nil {
		t.Fatalf("8-GPU servers: %v", err)
	}
	for _, j := range r.Jobs {
		if !j.Finished {
			t.Errorf("8-GPU servers: job %s never finished", j.Name)
		}
	}
}
