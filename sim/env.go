package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
)

// Models holds what the simulator knows about each model type: the fitted
// performance model (shared with the scheduler) and the measured
// iteration times it replays.
type Models struct {
	Env      perf.Env
	Fitted   map[string]*perf.Model // by canonical model type name
	Measured *dataset.Measured
	Fits     map[string]perf.FitStats
	// SpineGBps is each rack's spine uplink (0: the A800 reference) and
	// SpineAlone the cross-rack bandwidth share of a job alone on it: the
	// simulator prices a cross-rack job at SpineAlone and slows it when
	// jobs share the uplink; the policies see the models' SpineFactor
	// (the oversubscription, SetSpine).
	SpineGBps  float64
	SpineAlone float64
}

// LoadModels fits every model type that apps name (trace spellings
// accepted) once from the data directory, with its placements table when
// it has one, and loads the measured tables.
func LoadModels(ctx context.Context, dir string, env perf.Env, apps []string) (*Models, error) {
	return LoadModelsWith(ctx, dir, env, apps, nil)
}

// LoadModelsWith is LoadModels for model types beyond the built-ins too:
// cat's (sim --arch-file), or one derived from the data directory's
// profile of the type (dataset.ArchFor). Such a type is fitted on its
// profile when the directory has one, and priced by the unfitted defaults
// of its architecture when not.
func LoadModelsWith(ctx context.Context, dir string, env perf.Env, apps []string, cat perf.Catalog) (*Models, error) {
	m := &Models{Env: env, Fitted: map[string]*perf.Model{}, Fits: map[string]perf.FitStats{}}
	names := map[string]bool{}
	for _, a := range apps {
		names[perf.CanonicalName(a)] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	// Fits are independent: run them on every core, all at once (a fit
	// is a few goroutines of its own, some of its phases serial: with one
	// fit per core at a time, the last type's serial phases ran alone).
	fits := make([]perf.Model, len(sorted))
	stats := make([]perf.FitStats, len(sorted))
	errs := make([]error, len(sorted))
	var wg sync.WaitGroup
	for i, n := range sorted {
		a, _, err := dataset.ArchFor(ctx, dir, n, cat)
		if err != nil {
			return nil, err
		}
		_, builtin := perf.Builtin(n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fits[i], stats[i], errs[i] = dataset.FitModelFor(ctx, dir, a, env, true)
			if errs[i] != nil && !builtin {
				// a user type without a profile: its architecture's defaults
				fits[i], stats[i], errs[i] = perf.DefaultModel(a, env), perf.FitStats{}, nil
			}
		}()
	}
	wg.Wait()
	for i, n := range sorted {
		if errs[i] != nil {
			return nil, fmt.Errorf("fit %s: %w", n, errs[i])
		}
		m.Fitted[n] = &fits[i]
		m.Fits[n] = stats[i]
	}
	meas, err := dataset.LoadMeasured(ctx, dir)
	if err != nil {
		return nil, err
	}
	m.Measured = meas
	return m, nil
}

// DefaultModels uses the unfitted default model of every built-in type
// (and of extra's) and no measured tables: for generated traces without a
// data directory.
func DefaultModels(env perf.Env, extra ...perf.Arch) *Models {
	m := &Models{Env: env, Fitted: map[string]*perf.Model{}, Measured: dataset.NewMeasured()}
	for _, a := range append(perf.Builtins(), extra...) {
		dm := perf.DefaultModel(a, env)
		m.Fitted[perf.CanonicalName(a.Name)] = &dm
	}
	return m
}

// rateKey identifies a priced configuration.
type rateKey struct {
	model string
	plan  perf.Plan
	pl    string
	cross bool
	cpg   int
}

// rates prices configurations for one run, memoised.
type rates struct {
	m     *Models
	cache map[rateKey]rateVal
}

type rateVal struct {
	iter     float64
	measured bool
}

// iter is the seconds per iteration of plan on pl: measured when the
// table has the row, else predicted.
func (r *rates) iter(model string, plan perf.Plan, pl perf.Placement, cross bool, cpg int) (float64, bool) {
	k := rateKey{model, plan, pl.String(), cross, cpg}
	if v, ok := r.cache[k]; ok {
		return v.iter, v.measured
	}
	fm := r.m.Fitted[model]
	var v rateVal
	if t, ok := r.m.Measured.IterTime(model, fm.Arch, plan, pl); ok && !cross {
		v = rateVal{t, true}
		if plan.Offload && cpg != dataset.DefaultCPUThreads {
			// Offload rows were measured with DefaultCPUThreads cores per
			// GPU; another core count scales the measured time by the
			// model's ratio (the CPU optimizer step is what changes).
			res := perf.Resources{Placement: pl, CPUsPerGPU: float64(cpg)}
			at, err1 := fm.Predict(plan, res)
			res.CPUsPerGPU = dataset.DefaultCPUThreads
			base, err2 := fm.Predict(plan, res)
			if err1 == nil && err2 == nil && base.Iter > 0 {
				v.iter = t * at.Iter / base.Iter
			}
		}
	} else if b, err := r.alone(fm, cross).Predict(plan, perf.Resources{Placement: pl, CrossRack: cross, CPUsPerGPU: float64(cpg)}); err == nil && b.Iter > 0 {
		v = rateVal{b.Iter, false}
	}
	r.cache[k] = v
	return v.iter, v.measured
}

// known shows the policies the measured iteration times the simulator
// replays (sched.Known): what a control plane knows once it has observed a
// configuration or loaded the measured tables.
type known struct {
	r     *rates
	names map[*perf.Model]string
	plans map[plansKey][]perf.Plan
}

type plansKey struct {
	model string
	pl    string
}

func newKnown(r *rates) *known {
	k := &known{r: r, names: map[*perf.Model]string{}, plans: map[plansKey][]perf.Plan{}}
	for n, m := range r.m.Fitted {
		k.names[m] = n
	}
	return k
}

// Throughput implements sched.Known.
func (k *known) Throughput(m *perf.Model, p perf.Plan, pl perf.Placement, cpg int) (float64, bool) {
	name, ok := k.names[m]
	if !ok {
		return 0, false
	}
	it, measured := k.r.iter(name, p, pl, false, cpg)
	if !measured || it <= 0 {
		return 0, false
	}
	return float64(m.Arch.GlobalBatch) / it, true
}

// Plans implements sched.Known.
func (k *known) Plans(m *perf.Model, pl perf.Placement) []perf.Plan {
	name, ok := k.names[m]
	if !ok {
		return nil
	}
	key := plansKey{name, pl.String()}
	if ps, ok := k.plans[key]; ok {
		return ps
	}
	ps := k.r.m.Measured.Plans(name, m.Arch, pl)
	k.plans[key] = ps
	return ps
}

// network is the seconds per iteration a job of plan on pl uses
// inter-server links (the ones that matter for sharing when it spans racks) (the model's InterServer, scaled to the iteration
// time iter the simulator runs it at) and its exposed communication per
// iteration: what the placement adds over the same plan on NVLink alone.
func (r *rates) network(model string, plan perf.Plan, pl perf.Placement, cross bool, cpg int, iter float64) (float64, float64) {
	if len(pl) < 2 {
		return 0, 0
	}
	fm := r.alone(r.m.Fitted[model], cross)
	b, err := fm.Predict(plan, perf.Resources{Placement: pl, CrossRack: cross, CPUsPerGPU: float64(cpg)})
	if err != nil || b.Iter <= 0 {
		return 0, 0
	}
	ideal, err := fm.Predict(plan, perf.Resources{Placement: perf.Placement{pl.GPUs()}, CPUsPerGPU: float64(cpg)})
	exp := 0.0
	if err == nil {
		exp = math.Max(0, b.Iter-ideal.Iter) * iter / b.Iter
	}
	return b.InterServer * iter / b.Iter, exp
}

// SpineFactor is the cross-rack share of the in-rack bandwidth a job sees
// when racks of serversPerRack servers (100 GB/s RDMA each) share a
// spine uplink of spineGBps: 1/oversubscription, at most 1.
func SpineFactor(spineGBps float64, serversPerRack int) float64 {
	if spineGBps <= 0 || serversPerRack <= 0 {
		return 1
	}
	return math.Min(1, spineGBps/(float64(serversPerRack)*cluster.A800RDMAGBps))
}

// SetSpine configures racks of serversPerRack servers with spine uplinks
// of spineGBps (call before running): the models the policies see price a
// cross-rack placement at the oversubscription share (SpineFactor), the
// simulator prices it at what a job alone on the uplink gets and adds the
// slowdown of link sharing.
func (m *Models) SetSpine(spineGBps float64, serversPerRack int) {
	f := SpineFactor(spineGBps, serversPerRack)
	m.SpineGBps = spineGBps
	m.SpineAlone = 1
	if spineGBps > 0 {
		m.SpineAlone = math.Min(1, spineGBps/cluster.A800RDMAGBps)
	}
	m.Env.SpineFactor = f
	for _, fm := range m.Fitted {
		fm.Env.SpineFactor = f
	}
}

// alone is model with the spine priced as a job alone on it sees it.
func (r *rates) alone(fm *perf.Model, cross bool) *perf.Model {
	if !cross || r.m.SpineAlone <= 0 {
		return fm
	}
	c := *fm
	c.Env.SpineFactor = r.m.SpineAlone
	return &c
}

// online shows the policies what a control plane learns as it runs: the
// measured iteration time of a configuration (model type, plan,
// placement, cores per GPU) only once some job of that type has run in
// it. It is the simulator's honest default (Config.Oracle shows the whole
// tables). A new online value is made whenever a configuration is first
// seen (sched.Known's contract: a policy resets its caches when the value
// changes); the values share the record.
type online struct {
	r     *rates
	names map[*perf.Model]string
	seen  map[seenKey]bool
	plans map[plansKey][]perf.Plan
}

type seenKey struct {
	model string
	plan  perf.Plan
	pl    string
	cpg   int
}

func newOnline(r *rates) *online {
	o := &online{r: r, names: map[*perf.Model]string{}, seen: map[seenKey]bool{}, plans: map[plansKey][]perf.Plan{}}
	for n, m := range r.m.Fitted {
		o.names[m] = n
	}
	return o
}

// observe records that a job of model ran plan on pl with cpg cores per
// GPU at a measured speed; it returns the online value the next round
// should see (o itself when nothing new was learnt).
func (o *online) observe(model string, plan perf.Plan, pl perf.Placement, cpg int) *online {
	k := seenKey{model, plan, pl.String(), cpg}
	if o.seen[k] {
		return o
	}
	o.seen[k] = true
	pk := plansKey{model, pl.String()}
	if !slices.Contains(o.plans[pk], plan) {
		o.plans[pk] = append(o.plans[pk], plan)
		slices.SortFunc(o.plans[pk], func(a, b perf.Plan) int { return strings.Compare(a.String(), b.String()) })
	}
	n := *o
	return &n
}

// Throughput implements sched.Known.
func (o *online) Throughput(m *perf.Model, p perf.Plan, pl perf.Placement, cpg int) (float64, bool) {
	name, ok := o.names[m]
	if !ok || !o.seen[seenKey{name, p, pl.String(), cpg}] {
		return 0, false
	}
	it, measured := o.r.iter(name, p, pl, false, cpg)
	if !measured || it <= 0 {
		return 0, false
	}
	return float64(m.Arch.GlobalBatch) / it, true
}

// Plans implements sched.Known.
func (o *online) Plans(m *perf.Model, pl perf.Placement) []perf.Plan {
	name, ok := o.names[m]
	if !ok {
		return nil
	}
	return o.plans[plansKey{name, pl.String()}]
}
