package dataset

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/replan/replan/perf"
)

// ParseSamples reads a samples file for `replan perf fit`: CSV with a header
// naming at least plan, placement and iter_s, optionally fwd_s, opt_s (the
// measured optimizer phase of a run without offload), cpus_per_gpu and
// cross_rack. plan is a plan spec
// ("dp=2,tp=4,pp=1,mb=2,ga=4,zero=1", quoted because of its commas) or a
// Morphling exec_plan code ("248", "zero-offload"); placement is "44" or
// "16.16". Every bad row is reported with file, line and column.
func ParseSamples(name string, r io.Reader, a perf.Arch) ([]perf.Sample, error) {
	t, err := readTable(name, r, []string{"plan", "placement", "iter_s"})
	if err != nil {
		return nil, err
	}
	var errs []error
	var out []perf.Sample
	for i := range t.rows {
		line := t.lines[i]
		ps, _ := t.cell(i, "placement")
		pl, perr := ParsePlacementString(ps)
		if perr != nil {
			errs = append(errs, fmt.Errorf("%s:%d: placement: %v", name, line, perr))
			continue
		}
		code, _ := t.cell(i, "plan")
		var p perf.Plan
		if strings.Contains(code, "=") {
			p, err = perf.ParsePlanSpec(code)
		} else {
			p, err = PlanFromCode(code, a, pl.GPUs())
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: plan: %v", name, line, err))
			continue
		}
		if p.GPUs() != pl.GPUs() {
			errs = append(errs, fmt.Errorf("%s:%d: plan: %d GPUs, placement %s has %d", name, line, p.GPUs(), pl, pl.GPUs()))
			continue
		}
		s := perf.Sample{Plan: p, Resources: perf.Resources{Placement: pl, CPUsPerGPU: DefaultCPUThreads}}
		s.IterS = t.float(i, "iter_s", &errs)
		if s.IterS == 0 {
			errs = append(errs, fmt.Errorf("%s:%d: iter_s: must be > 0", name, line))
		}
		if _, ok := t.header["fwd_s"]; ok {
			s.FwdS = t.float(i, "fwd_s", &errs)
		}
		if _, ok := t.header["opt_s"]; ok {
			s.OptS = t.float(i, "opt_s", &errs)
		}
		if _, ok := t.header["cpus_per_gpu"]; ok {
			s.Resources.CPUsPerGPU = t.float(i, "cpus_per_gpu", &errs)
		}
		if v, ok := t.cell(i, "cross_rack"); ok && v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: cross_rack: want true/false, got %q", name, line, v))
			}
			s.Resources.CrossRack = b
		}
		out = append(out, s)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no samples", name)
	}
	return out, nil
}
