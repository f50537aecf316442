// Package dataset reads the Morphling artifact layout of measured A800 data:
//
//	profile/<model>/{config,data}.csv   few sampled runs a model is fitted from
//	placements/<model>/placements.csv   measured iteration time per plan and placement
//	workloads/workload-<name>.csv       cluster traces
//
// and turns rows into perf values. Parsers take readers and a file name and
// report every bad row with file, line and column; loaders read files.
package dataset

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/replan/replan/perf"
)

// table is a CSV file read with its header, so columns are found by name.
type table struct {
	name   string
	header map[string]int
	rows   [][]string
	lines  []int
}

func readTable(name string, r io.Reader, required []string) (*table, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = false
	head, err := cr.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("%s:1: empty file, want a header with %s", name, strings.Join(required, ","))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	t := &table{name: name, header: map[string]int{}}
	for i, h := range head {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		t.header[h] = i
	}
	var errs []error
	for _, req := range required {
		if _, ok := t.header[req]; !ok {
			errs = append(errs, fmt.Errorf("%s:1: header: missing column %q", name, req))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != len(head) {
			errs = append(errs, fmt.Errorf("%s:%d: want %d columns, got %d", name, line, len(head), len(rec)))
			continue
		}
		t.rows = append(t.rows, rec)
		t.lines = append(t.lines, line)
	}
	return t, errors.Join(errs...)
}

// cell reads a column of row i; ok is false when the table has no such column.
func (t *table) cell(i int, col string) (string, bool) {
	j, ok := t.header[col]
	if !ok {
		return "", false
	}
	return strings.TrimSpace(t.rows[i][j]), true
}

func (t *table) float(i int, col string, errs *[]error) float64 {
	s, _ := t.cell(i, col)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		*errs = append(*errs, fmt.Errorf("%s:%d: %s: want a number, got %q", t.name, t.lines[i], col, s))
		return 0
	}
	if v < 0 {
		*errs = append(*errs, fmt.Errorf("%s:%d: %s: must be >= 0, got %q", t.name, t.lines[i], col, s))
	}
	return v
}

func (t *table) int(i int, col string, errs *[]error) int {
	s, _ := t.cell(i, col)
	v, err := strconv.Atoi(s)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s:%d: %s: want an integer, got %q", t.name, t.lines[i], col, s))
		return 0
	}
	if v < 0 {
		*errs = append(*errs, fmt.Errorf("%s:%d: %s: must be >= 0, got %q", t.name, t.lines[i], col, s))
	}
	return v
}

// ProfileRow is one sampled run of profile/<model>/{config,data}.csv.
type ProfileRow struct {
	Line         int // line in config.csv (the same line in data.csv)
	Nodes, GPUs  int
	ParamsMiB    float64 // parameter count / 2^20
	SeqHid       float64
	CPUThreads   int
	ZeroType     int // 0 DP, 1 ZeRO-Offload, 2 ZeRO-DP
	TP, PP       bool
	ForwardMS    float64
	TccMS, OptMS float64
	IterMS       float64
	Strategy     string
	Recompute    bool // strategy's forward multiplier is 2
	// Written by `replan models export` besides the Morphling columns
	// (optional; the Morphling layout's readers ignore them): the exact
	// plan, placement, cores per GPU and model type of the run.
	Plan       *perf.Plan
	Placement  perf.Placement
	CPUsPerGPU float64
	ModelType  string
}

// Profile is a model's sampled runs.
type Profile struct {
	Model string
	Rows  []ProfileRow
}

// ParseProfile joins config.csv and data.csv row by row.
func ParseProfile(model, configName string, config io.Reader, dataName string, data io.Reader) (Profile, error) {
	ct, err := readTable(configName, config, []string{"nodes", "gpus", "parameter_size", "batch_size", "seq_hid", "num_cpu_threads", "zero_type", "is_tp", "is_pp"})
	if err != nil {
		return Profile{}, err
	}
	dt, err := readTable(dataName, data, []string{"forward_time", "Tcc", "Topt", "iter_time", "strategy"})
	if err != nil {
		return Profile{}, err
	}
	if len(ct.rows) != len(dt.rows) {
		return Profile{}, fmt.Errorf("%s has %d rows but %s has %d: they are joined row by row", configName, len(ct.rows), dataName, len(dt.rows))
	}
	var errs []error
	p := Profile{Model: model}
	for i := range ct.rows {
		r := ProfileRow{Line: ct.lines[i]}
		r.Nodes = ct.int(i, "nodes", &errs)
		r.GPUs = ct.int(i, "gpus", &errs)
		r.ParamsMiB = ct.float(i, "parameter_size", &errs)
		r.SeqHid = ct.float(i, "seq_hid", &errs)
		r.CPUThreads = ct.int(i, "num_cpu_threads", &errs)
		r.ZeroType = ct.int(i, "zero_type", &errs)
		r.TP = ct.int(i, "is_tp", &errs) == 1
		r.PP = ct.int(i, "is_pp", &errs) == 1
		r.ForwardMS = dt.float(i, "forward_time", &errs)
		r.TccMS = dt.float(i, "Tcc", &errs)
		r.OptMS = dt.float(i, "Topt", &errs)
		r.IterMS = dt.float(i, "iter_time", &errs)
		r.Strategy, _ = dt.cell(i, "strategy")
		if v, ok := ct.cell(i, "plan"); ok && v != "" {
			pl, err := perf.ParsePlanSpec(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: plan: %v", configName, r.Line, err))
			} else {
				r.Plan = &pl
			}
		}
		if v, ok := ct.cell(i, "placement"); ok && v != "" {
			pl, err := ParsePlacementString(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: placement: %v", configName, r.Line, err))
			}
			r.Placement = pl
		}
		if v, ok := ct.cell(i, "cpus_per_gpu"); ok && v != "" {
			r.CPUsPerGPU = ct.float(i, "cpus_per_gpu", &errs)
		}
		r.ModelType, _ = ct.cell(i, "model_type")
		if r.Plan != nil && r.Placement != nil && r.Plan.GPUs() != r.Placement.GPUs() {
			errs = append(errs, fmt.Errorf("%s:%d: plan: %d GPUs, placement %s has %d", configName, r.Line, r.Plan.GPUs(), r.Placement, r.Placement.GPUs()))
		}
		if r.Nodes < 1 || r.GPUs < r.Nodes {
			errs = append(errs, fmt.Errorf("%s:%d: gpus: want gpus >= nodes >= 1, got %d gpus on %d nodes", configName, r.Line, r.GPUs, r.Nodes))
		}
		if r.ZeroType > 2 {
			errs = append(errs, fmt.Errorf("%s:%d: zero_type: want 0, 1 or 2, got %d", configName, r.Line, r.ZeroType))
		}
		if len(r.Strategy) != 4 || strings.Trim(r.Strategy, "0123456789") != "" {
			errs = append(errs, fmt.Errorf("%s:%d: strategy: want 4 digits, got %q", dataName, dt.lines[i], r.Strategy))
		} else {
			r.Recompute = r.Strategy[0] == '2'
		}
		p.Rows = append(p.Rows, r)
	}
	if len(errs) > 0 {
		return Profile{}, errors.Join(errs...)
	}
	return p, nil
}

// Samples turns profile rows into perf samples for architecture a: plain
// data parallelism over the row's GPUs spread evenly on its nodes, ZeRO-2
// for ZeRO-DP, ZeRO-2 with optimizer offload for ZeRO-Offload, the row's
// CPU threads per GPU.
func (p Profile) Samples(a perf.Arch) []perf.Sample {
	var out []perf.Sample
	for _, r := range p.Rows {
		if r.Plan != nil && r.Placement != nil {
			// an exported run: its exact plan and placement
			out = append(out, perf.Sample{Plan: *r.Plan, Resources: perf.Resources{Placement: r.Placement, CPUsPerGPU: cmp.Or(r.CPUsPerGPU, float64(max(r.CPUThreads, 1)))},
				IterS: r.IterMS / 1000, FwdS: r.ForwardMS / 1000, OptS: r.OptMS / 1000})
			continue
		}
		plan := perf.Plan{DP: r.GPUs, TP: 1, PP: 1, GA: 1, Ckpt: r.Recompute}
		switch r.ZeroType {
		case 1:
			plan.ZeRO, plan.Offload = 2, true
		case 2:
			plan.ZeRO = 2
		}
		if a.GlobalBatch%r.GPUs == 0 {
			plan.MicroBatch = a.GlobalBatch / r.GPUs
		}
		out = append(out, perf.Sample{
			Plan:      plan,
			Resources: perf.Resources{Placement: perf.EvenPlacement(r.GPUs, r.Nodes), CPUsPerGPU: float64(max(r.CPUThreads, 1))},
			IterS:     r.IterMS / 1000,
			FwdS:      r.ForwardMS / 1000,
			OptS:      r.OptMS / 1000,
		})
	}
	return out
}

// ParamCount is the profile's parameter count (parameter_size · 2^20).
func (p Profile) ParamCount() float64 {
	if len(p.Rows) == 0 {
		return 0
	}
	return p.Rows[0].ParamsMiB * (1 << 20)
}

// LoadProfile reads dir/profile/<model>/{config,data}.csv.
func LoadProfile(ctx context.Context, dir, model string) (Profile, error) {
	if err := ctx.Err(); err != nil {
		return Profile{}, err
	}
	base := filepath.Join(dir, "profile", model)
	cf, err := os.Open(filepath.Join(base, "config.csv"))
	if err != nil {
		return Profile{}, err
	}
	defer cf.Close()
	df, err := os.Open(filepath.Join(base, "data.csv"))
	if err != nil {
		return Profile{}, err
	}
	defer df.Close()
	return ParseProfile(model, cf.Name(), cf, df.Name(), df)
}

// PlacementRow is one measured configuration of placements.csv.
type PlacementRow struct {
	Line       int
	ExecPlan   string
	Placement  perf.Placement
	CPUThreads int     // 0 when the table has no cpu_threads column
	IterS      float64 // 0: the configuration did not run
	ForwardMS  float64
}

// ParsePlacement parses a placements table.
func ParsePlacement(name string, r io.Reader) ([]PlacementRow, error) {
	t, err := readTable(name, r, []string{"exec_plan", "placement", "iter_time"})
	if err != nil {
		return nil, err
	}
	var errs []error
	var out []PlacementRow
	for i := range t.rows {
		row := PlacementRow{Line: t.lines[i]}
		row.ExecPlan, _ = t.cell(i, "exec_plan")
		ps, _ := t.cell(i, "placement")
		pl, perr := ParsePlacementString(ps)
		if perr != nil {
			errs = append(errs, fmt.Errorf("%s:%d: placement: %v", name, row.Line, perr))
		}
		row.Placement = pl
		row.IterS = t.float(i, "iter_time", &errs)
		if _, ok := t.header["cpu_threads"]; ok {
			row.CPUThreads = t.int(i, "cpu_threads", &errs)
		}
		if _, ok := t.header["forward"]; ok {
			row.ForwardMS = t.float(i, "forward", &errs)
		}
		if row.ExecPlan == "" {
			errs = append(errs, fmt.Errorf("%s:%d: exec_plan: empty", name, row.Line))
		}
		out = append(out, row)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// ParsePlacementString reads "2222" (one digit per server) or "16.16".
func ParsePlacementString(s string) (perf.Placement, error) {
	if s == "" {
		return nil, errors.New("empty")
	}
	var parts []string
	if strings.Contains(s, ".") {
		parts = strings.Split(s, ".")
	} else {
		parts = strings.Split(s, "")
	}
	pl := make(perf.Placement, 0, len(parts))
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("want GPU counts >= 1 per server (\"44\" or \"16.16\"), got %q", s)
		}
		pl = append(pl, n)
	}
	if len(pl) > 4096 {
		return nil, fmt.Errorf("%d servers: too many", len(pl))
	}
	return pl, nil
}

// Conventions for the named plans of the data, applied by PlanFromCode.
const (
	// NamedGASteps is the accumulation steps assumed for "ga" rows.
	NamedGASteps = 2
	// DefaultCPUThreads is the CPU threads per GPU assumed for offload rows
	// without a cpu_threads column (the profiles used 4).
	DefaultCPUThreads = 4
)

// PlanFromCode converts the data's exec_plan to a plan for gpus GPUs and
// architecture a. Codes are either three digits PP, TP, DP ("248") with one
// micro-batch per replica (the data's PP runs show no pipeline overlap: the
// iteration time of gpt2 151..851 is flat in PP while the per-stage forward
// falls as 1/PP), or named plans joined by "+": ga (DP with
// NamedGASteps accumulation steps), gc (activation checkpointing), zero-dp
// (ZeRO-2), zero-offload (ZeRO-2 with optimizer offload), tp (all GPUs in
// one TP group).
func PlanFromCode(code string, a perf.Arch, gpus int) (perf.Plan, error) {
	return PlanFromCodeAs(code, a, gpus, WholeBatch)
}

// MicroBatching is how a table's PP/TP/DP codes with TP or PP above one
// (Megatron runs) split each replica's share of the global batch. The
// tables do not say; FitModel and Validate read a table both ways and keep
// the reading its rows fit better (chooseMicroBatching).
type MicroBatching int

const (
	// WholeBatch: one micro-batch of batch/DP per replica, GA 1 (the
	// batch-8 tables: gpt2 151..851 is flat in PP, so no pipelining).
	WholeBatch MicroBatching = iota
	// MicroBatchOne: micro-batch 1, GA = batch/DP micro-batches through
	// the pipeline (Megatron's default --micro-batch-size).
	MicroBatchOne
)

func (m MicroBatching) String() string {
	if m == MicroBatchOne {
		return "micro-batch 1"
	}
	return "one micro-batch per replica"
}

// PlanFromCodeAs is PlanFromCode with PP/TP/DP codes read as mb says. A
// code whose DP does not divide the batch is read as WholeBatch.
func PlanFromCodeAs(code string, a perf.Arch, gpus int, mb MicroBatching) (perf.Plan, error) {
	if gpus < 1 {
		return perf.Plan{}, fmt.Errorf("exec_plan %q: no GPUs", code)
	}
	if len(code) == 3 && strings.Trim(code, "0123456789") == "" {
		pp, tp, dp := int(code[0]-'0'), int(code[1]-'0'), int(code[2]-'0')
		if pp < 1 || tp < 1 || dp < 1 {
			return perf.Plan{}, fmt.Errorf("exec_plan %q: PP, TP and DP digits must be >= 1", code)
		}
		if pp*tp*dp != gpus {
			return perf.Plan{}, fmt.Errorf("exec_plan %q: PP·TP·DP = %d, placement has %d GPUs", code, pp*tp*dp, gpus)
		}
		if mb == MicroBatchOne && (tp > 1 || pp > 1) && a.GlobalBatch > 0 && a.GlobalBatch%dp == 0 {
			return perf.Plan{DP: dp, TP: tp, PP: pp, GA: a.GlobalBatch / dp, MicroBatch: 1}, nil
		}
		return perf.Plan{DP: dp, TP: tp, PP: pp, GA: 1, MicroBatch: microBatch(a.GlobalBatch, dp, 1)}, nil
	}
	p := perf.Plan{DP: gpus, TP: 1, PP: 1, GA: 1}
	for _, part := range strings.Split(code, "+") {
		switch part {
		case "ga":
			p.GA = NamedGASteps
		case "gc":
			p.Ckpt = true
		case "zero-dp":
			p.ZeRO = 2
		case "zero-offload":
			p.ZeRO, p.Offload = 2, true
		case "tp":
			p.TP, p.DP = gpus, 1
		default:
			return perf.Plan{}, fmt.Errorf("exec_plan %q: unknown plan %q (want PP/TP/DP digits or ga, gc, zero-dp, zero-offload, tp joined by +)", code, part)
		}
	}
	p.MicroBatch = microBatch(a.GlobalBatch, p.DP, p.GA)
	return p, nil
}

// microBatch is batch/(dp·ga) when whole, else 0 (the data has uneven rows,
// e.g. batch 32 on 7 GPUs; the model then works with the fraction).
func microBatch(batch, dp, ga int) int {
	if dp*ga > 0 && batch%(dp*ga) == 0 {
		return batch / (dp * ga)
	}
	return 0
}

// PlanFamily names a code's family for reports: the named plan itself, or
// for PP/TP/DP codes the dimensions above one ("dp+tp+pp", "tp+pp", ...).
func PlanFamily(code string) string {
	if len(code) == 3 && strings.Trim(code, "0123456789") == "" {
		var dims []string
		if code[2] > '1' {
			dims = append(dims, "dp")
		}
		if code[1] > '1' {
			dims = append(dims, "tp")
		}
		if code[0] > '1' {
			dims = append(dims, "pp")
		}
		if len(dims) == 0 {
			return "single"
		}
		return strings.Join(dims, "+")
	}
	return code
}

// LoadPlacement reads dir/placements/<name>/placements.csv.
func LoadPlacement(ctx context.Context, dir, name string) ([]PlacementRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, "placements", name, "placements.csv"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParsePlacement(f.Name(), f)
}

// ListDir returns the model names that have a profile and those that have a
// placements table under dir.
func ListDir(dir string) (profiles, placements []string, err error) {
	read := func(sub string) ([]string, error) {
		ents, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			return nil, err
		}
		var out []string
		for _, e := range ents {
			isDir := e.IsDir()
			if e.Type()&os.ModeSymlink != 0 {
				// a model linked in from another data directory
				st, err := os.Stat(filepath.Join(dir, sub, e.Name()))
				isDir = err == nil && st.IsDir()
			}
			if isDir {
				out = append(out, e.Name())
			}
		}
		sort.Strings(out)
		return out, nil
	}
	if profiles, err = read("profile"); err != nil {
		return nil, nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	if placements, err = read("placements"); err != nil {
		return nil, nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	return profiles, placements, nil
}
