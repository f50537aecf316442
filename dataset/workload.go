package dataset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/replan/replan/internal/labels"
)

// WorkloadJob is one row of a Morphling workload trace
// (workloads/workload-<name>.csv).
type WorkloadJob struct {
	Line        int
	Name        string
	Submit      float64 // seconds from the start of the trace
	Duration    float64 // seconds at the requested resources (informative)
	Application string  // model type as the trace spells it (llama7 = llama7b)
	GPUs        int
	CPUs        int
	Bandwidth   float64 // 1.25 when the job spans servers
	ExecPlan    string  // the plan the user asked for (named plan or PP/TP/DP code)
	Steps       int     // iterations to run
	SLA         bool    // a guaranteed job of the tenant with a quota
	// Labels are the server labels the job requires (the optional
	// column labels: requirements separated by ';', e.g.
	// "ib-hdr;gpu=a800-80g"; a job spec's constraint.labels), checked
	// and written back joined by ';' ("": none). LabelList splits them.
	Labels string
}

// LabelList is j's label requirements (nil: none).
func (j WorkloadJob) LabelList() []string {
	if j.Labels == "" {
		return nil
	}
	return strings.Split(j.Labels, ";")
}

// WorkloadColumns is the header of a workload trace, in order.
var WorkloadColumns = []string{"name", "submission_time", "duration", "application", "num_gpus", "num_cpus", "bandwidth", "exec_plan", "steps", "is_sla"}

// ParseWorkload reads a workload trace. Every bad row is reported with
// file, line and column; on error nothing is returned.
func ParseWorkload(name string, r io.Reader) ([]WorkloadJob, error) {
	t, err := readTable(name, r, WorkloadColumns)
	if err != nil {
		return nil, err
	}
	var errs []error
	out := make([]WorkloadJob, 0, len(t.rows))
	seen := map[string]int{}
	for i := range t.rows {
		j := WorkloadJob{Line: t.lines[i]}
		j.Name, _ = t.cell(i, "name")
		j.Submit = t.float(i, "submission_time", &errs)
		j.Duration = t.float(i, "duration", &errs)
		j.Application, _ = t.cell(i, "application")
		j.GPUs = t.int(i, "num_gpus", &errs)
		j.CPUs = t.int(i, "num_cpus", &errs)
		j.Bandwidth = t.float(i, "bandwidth", &errs)
		j.ExecPlan, _ = t.cell(i, "exec_plan")
		j.Steps = t.int(i, "steps", &errs)
		sla := t.int(i, "is_sla", &errs)
		j.SLA = sla == 1
		if j.Name == "" {
			errs = append(errs, fmt.Errorf("%s:%d: name: empty", name, j.Line))
		} else if l, dup := seen[j.Name]; dup {
			errs = append(errs, fmt.Errorf("%s:%d: name: %q already used on line %d", name, j.Line, j.Name, l))
		}
		seen[j.Name] = j.Line
		if j.Application == "" {
			errs = append(errs, fmt.Errorf("%s:%d: application: empty", name, j.Line))
		}
		if j.GPUs < 1 {
			errs = append(errs, fmt.Errorf("%s:%d: num_gpus: must be >= 1, got %d", name, j.Line, j.GPUs))
		}
		if j.Steps < 1 {
			errs = append(errs, fmt.Errorf("%s:%d: steps: must be >= 1, got %d", name, j.Line, j.Steps))
		}
		if sla > 1 {
			errs = append(errs, fmt.Errorf("%s:%d: is_sla: want 0 or 1, got %d", name, j.Line, sla))
		}
		if _, ok := t.header["labels"]; ok {
			cell, _ := t.cell(i, "labels")
			j.Labels = strings.Join(parseLabelsCell(name, j.Line, cell, &errs), ";")
		}
		if strings.TrimSpace(j.ExecPlan) == "" {
			errs = append(errs, fmt.Errorf("%s:%d: exec_plan: empty", name, j.Line))
		}
		out = append(out, j)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no jobs", name)
	}
	return out, nil
}

// LoadWorkload reads a workload trace file.
func LoadWorkload(ctx context.Context, path string) ([]WorkloadJob, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseWorkload(path, f)
}

// WriteWorkload writes jobs as a workload trace with the standard header.
func WriteWorkload(w io.Writer, jobs []WorkloadJob) error {
	withLabels := false
	for _, j := range jobs {
		withLabels = withLabels || j.Labels != ""
	}
	head := strings.Join(WorkloadColumns, ",")
	if withLabels {
		head += ",labels"
	}
	if _, err := fmt.Fprintln(w, head); err != nil {
		return err
	}
	for _, j := range jobs {
		sla := 0
		if j.SLA {
			sla = 1
		}
		if _, err := fmt.Fprintf(w, "%s,%g,%g,%s,%d,%d,%g,%s,%d,%d", j.Name, j.Submit, j.Duration, j.Application, j.GPUs, j.CPUs, j.Bandwidth, j.ExecPlan, j.Steps, sla); err != nil {
			return err
		}
		if withLabels {
			if _, err := fmt.Fprintf(w, ",%s", j.Labels); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintln(w); err != nil {
			return err
		}
	}
	return nil
}

// parseLabelsCell reads the labels column of a workload row: label
// requirements separated by ';' ("" for none), each checked.
func parseLabelsCell(name string, line int, cell string, errs *[]error) []string {
	var out []string
	for _, r := range strings.Split(cell, ";") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		if err := labels.CheckRequirement(r); err != nil {
			*errs = append(*errs, fmt.Errorf("%s:%d: labels: %v", name, line, err))
			continue
		}
		out = append(out, r)
	}
	return out
}
