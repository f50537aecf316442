package dataset

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/replan/replan/perf"
)

// Protocol describes how Validate splits the data into fitting and held-out
// rows. It is printed with every report.
const Protocol = `fit on the model's profile samples plus at most 7 placements rows, predict every other placements row (iter_time 0 rows skipped). ` +
	`Fit rows are chosen before any prediction by a fixed rule: rows are grouped by plan family, families ordered by size (largest first, then name), ` +
	`rows in a family ordered by (GPUs, servers, placement, exec_plan); families are visited round-robin and each gives its next row in spread order ` +
	`(middle, first, last, quarter, three-quarter, ...) whose placement no chosen row has yet (or its next row when none is left) until 7 rows are taken. ` +
	`Profile rows are the plans they ran at the model type's own global batch (llama7b_bsz16 fits on llama7b's batch-8 profile as batch-8 runs). ` +
	`A PP/TP/DP code with TP or PP above one is read as one micro-batch of batch/DP per replica unless the fit rows, read as micro-batch 1 (GA = batch/DP, Megatron's default), fit with an RMSLE under 2/3 of that (the report says which reading, with both RMSLE). ` +
	`A profile whose parameter count is more than 25% away from the model's (llama30b's profile is llama7b's) is used only for the forward profile, scaled by the parameter ratio.`

// MaxWorstRows is how many of a model's worst held-out rows a report lists.
const MaxWorstRows = 5

// MaxFitRows is the number of placements rows Validate may fit on.
const MaxFitRows = 7

// ProtocolFor is Protocol with at most fitRows placements rows fitted (0:
// the profile alone, as a scheduler serves a model it has no measured
// placements of).
func ProtocolFor(fitRows int) string {
	if fitRows == MaxFitRows {
		return Protocol
	}
	return strings.ReplaceAll(strings.ReplaceAll(Protocol, "at most 7 placements rows", fmt.Sprintf("at most %d placements rows", fitRows)), "until 7 rows are taken", fmt.Sprintf("until %d rows are taken", fitRows))
}

// FamilyReport is the error of one plan family of one model.
type FamilyReport struct {
	Plan      string  `json:"plan"`
	Rows      int     `json:"rows"`
	AvgErrPct float64 `json:"avg_err_pct"`
	MaxErrPct float64 `json:"max_err_pct"`
}

// ModelReport is the error of one model over its held-out rows.
type ModelReport struct {
	Model   string `json:"model"`
	Profile string `json:"profile"`
	// Rows counts the held-out rows of the protocol (the JSON name
	// "rows" is the leave-one-out rows array, LOORows).
	Rows      int            `json:"held_out_rows"`
	AvgErrPct float64        `json:"avg_err_pct"`
	MaxErrPct float64        `json:"max_err_pct"`
	Plans     []FamilyReport `json:"plans"`
	FitRows   []string       `json:"fit_rows"` // "exec_plan@placement"
	Fit       perf.FitStats  `json:"fit"`
	Params    perf.Params    `json:"params"`
	Forward   perf.Forward   `json:"forward"`
	Notes     []string       `json:"notes,omitempty"`
	// MicroBatching is how the table's PP/TP codes were read (the tables
	// do not say how many micro-batches a Megatron run used): "one
	// micro-batch per replica" unless its fit rows fit clearly better as
	// "micro-batch 1", with both fits' RMSLE when the readings differ.
	MicroBatching string `json:"micro_batching"`
	Worst         string `json:"worst"` // the row with the maximum error
	// WorstRows are the held-out rows with the largest errors, largest
	// first (at most MaxWorstRows): plan, placement, measured, predicted.
	WorstRows []string `json:"worst_rows,omitempty"`
	// Splits are the errors of the held-out rows by placement kind: one
	// server, several servers each holding a multiple of its GPUs per
	// NIC ("even"), several servers one of which does not ("uneven",
	// perf.Env.Stray).
	Splits []FamilyReport `json:"splits"`
	// ConstAvgErrPct and ConstMaxErrPct are a constant guess's errors on
	// the same rows (every row predicted at the geometric mean of the fit
	// rows' measured times): the baseline the model must beat.
	ConstAvgErrPct float64 `json:"const_avg_err_pct"`
	ConstMaxErrPct float64 `json:"const_max_err_pct"`
	// The leave-one-model-out figures (ValidateOptions.LOO, LOOProtocol):
	// errors of the rows not fitted, plan-choice regret per placement,
	// every row with its prediction, and the parameters used (hardware
	// terms fitted on the other model types).
	LOOAvgErrPct     float64     `json:"loo_avg_err_pct"`
	LOOMaxErrPct     float64     `json:"loo_max_err_pct"`
	RegretMeanPct    float64     `json:"regret_mean_pct"`
	RegretMaxPct     float64     `json:"regret_max_pct"`
	RegretPlacements int         `json:"regret_placements"`
	LOORows          []LOORow    `json:"rows,omitempty"`
	LOOParams        perf.Params `json:"loo_params"`
}

// Report is the result of Validate.
type Report struct {
	Protocol string        `json:"protocol"`
	Models   []ModelReport `json:"models"`
	// LOOProtocol and LOOFolds describe the leave-one-model-out check
	// when it ran: each fold's held-out tables and the hardware terms
	// fitted on the others.
	LOOProtocol string    `json:"loo_protocol,omitempty"`
	LOOFolds    []LOOFold `json:"loo_folds,omitempty"`
	Skipped     []string  `json:"skipped,omitempty"`
}

var bszSuffix = regexp.MustCompile(`^(.*)_bsz(\d+)$`)

// profileFor maps a placements table name to the profile and architecture
// it is served from: llama7 → llama7b, llama7b_bsz16 → llama7b with a
// global batch of 16.
func profileFor(name string, profiles []string) (profile string, arch perf.Arch, ok bool) {
	profile, arch, known := resolveModel(name, profiles, nil)
	return profile, arch, profile != "" && known
}

// resolveModel finds a placements table's profile ("" when there is none)
// and architecture: cat's (user model types, perf validate --arch-file), else
// the built-in one; known is false when neither has it (ArchFromProfile
// can then derive one). A "_bszN" suffix sets the global batch.
func resolveModel(name string, profiles []string, cat perf.Catalog) (profile string, arch perf.Arch, known bool) {
	base, batch := name, 0
	if m := bszSuffix.FindStringSubmatch(name); m != nil {
		base = m[1]
		batch, _ = strconv.Atoi(m[2])
	}
	canon := perf.CanonicalName(base)
	if a, ok := cat[base]; ok {
		arch, known = a, true
	} else if a, ok := perf.Builtin(canon); ok {
		arch, known = a, true
	}
	if batch > 0 {
		arch.GlobalBatch = batch
	}
	for _, p := range []string{canon, base, arch.Name} {
		if p != "" && slices.Contains(profiles, p) {
			return p, arch, known
		}
	}
	return "", arch, known
}

// profileArch is a with the global batch its profile was measured at: the
// built-in model type's.
func profileArch(a perf.Arch) perf.Arch {
	if b, ok := perf.Builtin(a.Name); ok {
		a.GlobalBatch = b.GlobalBatch
	}
	return a
}

type heldRow struct {
	row    PlacementRow
	family string
	sample perf.Sample
}

// Validate fits and predicts every model of dir that has both a profile and
// a placements table, restricted to models when non-empty (names as in the
// placements directory or their profile names).
func Validate(ctx context.Context, dir string, models []string, env perf.Env) (Report, error) {
	return ValidateRows(ctx, dir, models, env, MaxFitRows)
}

// ValidateRows is Validate fitting at most fitRows placements rows per
// model (0: the profile alone). A model with nothing left to fit on (its
// profile is another model's and no rows are fitted) is skipped, and the
// report says why.
func ValidateRows(ctx context.Context, dir string, models []string, env perf.Env, fitRows int) (Report, error) {
	return ValidateWith(ctx, dir, env, ValidateOptions{Models: models, FitRows: fitRows})
}

// ValidateOptions are ValidateWith's choices.
type ValidateOptions struct {
	// Models restricts the report to these tables (or their profiles'
	// names); empty: every table with a profile.
	Models []string
	// FitRows is the most placements rows fitted per model (0: the
	// profile alone).
	FitRows int
	// LOO adds the leave-one-model-out check (LOOProtocol): every table
	// of the directory with a profile is read, selected or not, since the
	// hardware terms of a held-out model are fitted on all the others.
	LOO bool
	// Archs are model types beyond the built-ins (perf validate --arch-file).
	// A table whose model type is in neither is validated on an
	// architecture derived from its profile (ArchFromProfile), and the
	// report's notes say what was assumed.
	Archs perf.Catalog
}

// ValidateWith is Validate with options.
func ValidateWith(ctx context.Context, dir string, env perf.Env, o ValidateOptions) (Report, error) {
	models, fitRows := o.Models, o.FitRows
	if fitRows < 0 {
		return Report{}, fmt.Errorf("validate: fit rows must be >= 0, got %d", fitRows)
	}
	rep := Report{Protocol: ProtocolFor(fitRows)}
	profiles, tables, err := ListDir(dir)
	if err != nil {
		return rep, err
	}
	var loo []*looData
	selected := map[string]bool{}
	for _, name := range tables {
		prof, arch, known := resolveModel(name, profiles, o.Archs)
		sel := len(models) == 0 || slices.Contains(models, name) || (prof != "" && slices.Contains(models, prof))
		if !sel && !o.LOO {
			continue
		}
		selected[name] = sel
		if prof == "" {
			base := name
			if m := bszSuffix.FindStringSubmatch(name); m != nil {
				base = m[1]
			}
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: no profile to fit from (no %s under %s)", name, base, filepath.Join(dir, "profile")))
			continue
		}
		profArch := profileArch(arch)
		var archNote string
		if !known {
			var profBatch int
			var err error
			if arch, profBatch, archNote, err = deriveArch(ctx, dir, name, prof, tables); err != nil {
				if sel {
					rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %v", name, err))
				}
				continue
			}
			profArch = arch
			profArch.GlobalBatch = profBatch
		}
		mr, ld, err := validateModelData(ctx, dir, name, prof, arch, profArch, env, fitRows)
		if archNote != "" {
			mr.Notes = append([]string{archNote}, mr.Notes...)
		}
		if errors.Is(err, errNothingToFit) {
			if sel {
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %v", name, err))
			}
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("validate %s: %w", name, err)
		}
		loo = append(loo, ld)
		if sel {
			rep.Models = append(rep.Models, mr)
		}
	}
	if o.LOO && len(rep.Models) > 0 {
		if err := leaveOneOut(&rep, loo, selected); err != nil {
			return rep, err
		}
	}
	if len(rep.Models) == 0 && len(models) > 0 {
		return rep, fmt.Errorf("no model among %s has both a profile and a placements table in %s", strings.Join(models, ","), dir)
	}
	return rep, nil
}

// errNothingToFit: a model whose profile gave only its forward and no
// placements row is fitted.
var errNothingToFit = errors.New("nothing to fit on: its profile is another model's (forward only) and no placements rows are fitted")

// looData is what the leave-one-model-out check needs of a table: the
// model (its forward profile set, its own fit), the profile samples it fits
// on, every measured row read as the protocol reads it, and which rows the
// protocol fits.
type looData struct {
	name, profile string
	model         perf.Model
	profSamples   []perf.Sample
	held          []heldRow
	chosen        []int
}

func validateModelData(ctx context.Context, dir, name, profName string, arch, profArch perf.Arch, env perf.Env, fitRows int) (ModelReport, *looData, error) {
	mr := ModelReport{Model: name, Profile: profName}
	prof, err := LoadProfile(ctx, dir, profName)
	if err != nil {
		return mr, nil, err
	}
	rows, err := LoadPlacement(ctx, dir, name)
	if err != nil {
		return mr, nil, err
	}
	// The profile was measured at the model type's own global batch (the
	// built-in's): a table at another batch (llama7b_bsz16) fits on its
	// samples as the plans they ran, each GPU's share of batch 8.
	profSamples := prof.Samples(profArch)
	fwd, screened, err := perf.FitForwardScreened(profArch, profSamples)
	if err != nil {
		return mr, nil, err
	}
	for _, i := range screened {
		if i >= 0 {
			s := profSamples[i]
			mr.Notes = append(mr.Notes, fmt.Sprintf("forward fit screened out a misreported forward time: %s on %s, forward %.4fs", s.Plan, s.Resources.Placement, s.FwdS))
		}
	}
	var fitSamples []perf.Sample
	ratio := arch.Params / prof.ParamCount()
	if math.Abs(ratio-1) > 0.25 {
		fwd.Alpha *= ratio
		fwd.Beta *= ratio
		mr.Notes = append(mr.Notes, fmt.Sprintf("profile %s has %.3g parameters, model has %.3g: profile used for the forward profile only, scaled ×%.2f", profName, prof.ParamCount(), arch.Params, ratio))
	} else {
		fitSamples = append(fitSamples, profSamples...)
	}

	skippedZero := 0
	for _, r := range rows {
		if r.IterS <= 0 {
			skippedZero++
		} else if _, err := PlanFromCode(r.ExecPlan, arch, r.Placement.GPUs()); err != nil {
			mr.Notes = append(mr.Notes, fmt.Sprintf("line %d skipped: %v", r.Line, err))
		}
	}
	if skippedZero > 0 {
		mr.Notes = append(mr.Notes, fmt.Sprintf("%d rows with iter_time 0 (did not run) skipped", skippedZero))
	}
	m := perf.Model{Arch: arch, Forward: fwd, Params: perf.DefaultParams, Env: env}
	pick := func(h []heldRow) []int { return chooseFitRows(h, fitRows) }
	mbc, held, err := chooseMicroBatching(m, fitSamples, rows, arch, pick)
	if err != nil {
		return mr, nil, err
	}
	mr.MicroBatching = mbc.String()
	if mbc.Compared {
		mr.Notes = append(mr.Notes, "PP/TP codes read as "+mbc.String())
	}
	chosen := pick(held)
	ld := &looData{name: name, profile: profName, model: m, profSamples: append([]perf.Sample(nil), fitSamples...), held: held, chosen: chosen}
	for _, i := range chosen {
		fitSamples = append(fitSamples, held[i].sample)
		mr.FitRows = append(mr.FitRows, held[i].row.ExecPlan+"@"+held[i].row.Placement.String())
	}
	if len(fitSamples) == 0 {
		return mr, nil, errNothingToFit
	}
	params, stats, err := fitChosen(m, fitSamples, mbc)
	if err != nil {
		return mr, nil, err
	}
	m.Params = params
	ld.model.Params = params
	mr.Params, mr.Fit, mr.Forward = params, stats, fwd
	for _, i := range stats.Dropped {
		s := fitSamples[i]
		mr.Notes = append(mr.Notes, fmt.Sprintf("fit screened out a bad measurement: %s on %s, %.3fs", s.Plan, s.Resources.Placement, s.IterS))
	}
	for _, i := range stats.Suspect {
		s := fitSamples[i]
		mr.Notes = append(mr.Notes, fmt.Sprintf("fit kept a suspect measurement (too many to screen): %s on %s, %.3fs", s.Plan, s.Resources.Placement, s.IterS))
	}
	for _, f := range stats.Flags {
		mr.Notes = append(mr.Notes, "fit: "+f)
	}

	isFit := map[int]bool{}
	logSum := 0.0
	for _, i := range chosen {
		isFit[i] = true
		logSum += math.Log(held[i].row.IterS)
	}
	guess := math.Exp(logSum / float64(max(len(chosen), 1)))
	splits := map[string]*FamilyReport{}
	var constSum float64
	fam := map[string]*FamilyReport{}
	var sum float64
	type worstRow struct {
		e float64
		s string
	}
	var worst []worstRow
	for i, h := range held {
		if isFit[i] {
			continue
		}
		b, err := m.Predict(h.sample.Plan, h.sample.Resources)
		if err != nil {
			return mr, nil, fmt.Errorf("line %d: %w", h.row.Line, err)
		}
		e := 100 * math.Abs(b.Iter-h.row.IterS) / h.row.IterS
		f := fam[h.family]
		if f == nil {
			f = &FamilyReport{Plan: h.family}
			fam[h.family] = f
		}
		f.Rows++
		f.AvgErrPct += e
		f.MaxErrPct = math.Max(f.MaxErrPct, e)
		kind := "single-server"
		switch pl := h.sample.Resources.Placement; {
		case env.Stray(pl):
			kind = "uneven multi-server"
		case pl.Servers() > 1:
			kind = "even multi-server"
		}
		sp := splits[kind]
		if sp == nil {
			sp = &FamilyReport{Plan: kind}
			splits[kind] = sp
		}
		sp.Rows++
		sp.AvgErrPct += e
		sp.MaxErrPct = math.Max(sp.MaxErrPct, e)
		ce := 100 * math.Abs(guess-h.row.IterS) / h.row.IterS
		constSum += ce
		mr.ConstMaxErrPct = math.Max(mr.ConstMaxErrPct, ce)
		mr.Rows++
		sum += e
		worst = append(worst, worstRow{e, fmt.Sprintf("%s@%s (%s): measured %.3fs, predicted %.3fs, %+.1f%%", h.row.ExecPlan, h.row.Placement, kind, h.row.IterS, b.Iter, 100*(b.Iter-h.row.IterS)/h.row.IterS)})
		if e > mr.MaxErrPct {
			mr.MaxErrPct = e
			mr.Worst = fmt.Sprintf("%s@%s: measured %.3fs, predicted %.3fs", h.row.ExecPlan, h.row.Placement, h.row.IterS, b.Iter)
		}
	}
	sort.SliceStable(worst, func(i, j int) bool { return worst[i].e > worst[j].e })
	for i := 0; i < len(worst) && i < MaxWorstRows; i++ {
		mr.WorstRows = append(mr.WorstRows, worst[i].s)
	}
	if mr.Rows > 0 {
		mr.AvgErrPct = sum / float64(mr.Rows)
		mr.ConstAvgErrPct = constSum / float64(mr.Rows)
	}
	for _, k := range []string{"single-server", "even multi-server", "uneven multi-server"} {
		if sp := splits[k]; sp != nil {
			sp.AvgErrPct /= float64(sp.Rows)
			mr.Splits = append(mr.Splits, *sp)
		}
	}
	for _, f := range fam {
		f.AvgErrPct /= float64(f.Rows)
		mr.Plans = append(mr.Plans, *f)
	}
	sort.Slice(mr.Plans, func(i, j int) bool { return mr.Plans[i].Plan < mr.Plans[j].Plan })
	return mr, ld, nil
}

// chooseFitRows implements the selection rule of Protocol and returns
// indexes into rows.
func chooseFitRows(rows []heldRow, n int) []int {
	byFam := map[string][]int{}
	for i, r := range rows {
		byFam[r.family] = append(byFam[r.family], i)
	}
	fams := make([]string, 0, len(byFam))
	for f, idx := range byFam {
		fams = append(fams, f)
		sort.SliceStable(idx, func(a, b int) bool {
			ra, rb := rows[idx[a]].row, rows[idx[b]].row
			ka := fmt.Sprintf("%04d %04d %s %s", ra.Placement.GPUs(), ra.Placement.Servers(), ra.Placement, ra.ExecPlan)
			kb := fmt.Sprintf("%04d %04d %s %s", rb.Placement.GPUs(), rb.Placement.Servers(), rb.Placement, rb.ExecPlan)
			return ka < kb
		})
		order := spread(len(idx))
		ordered := make([]int, len(order))
		for k, o := range order {
			ordered[k] = idx[o]
		}
		byFam[f] = ordered
	}
	sort.Slice(fams, func(a, b int) bool {
		if len(byFam[fams[a]]) != len(byFam[fams[b]]) {
			return len(byFam[fams[a]]) > len(byFam[fams[b]])
		}
		return fams[a] < fams[b]
	})
	// Families are visited round-robin; each takes its next row in spread
	// order whose placement no chosen row has yet (so the fit sees as many
	// placements as rows), or its next row when every placement is taken.
	var out []int
	taken := map[int]bool{}
	usedPl := map[string]bool{}
	for len(out) < n {
		took := false
		for _, f := range fams {
			if len(out) == n {
				break
			}
			pick := -1
			for _, i := range byFam[f] {
				if !taken[i] && !usedPl[rows[i].row.Placement.String()] {
					pick = i
					break
				}
			}
			if pick < 0 {
				for _, i := range byFam[f] {
					if !taken[i] {
						pick = i
						break
					}
				}
			}
			if pick < 0 {
				continue
			}
			taken[pick] = true
			usedPl[rows[pick].row.Placement.String()] = true
			out = append(out, pick)
			took = true
		}
		if !took {
			break
		}
	}
	return out
}

// spread orders 0..n-1 as middle, first, last, then midpoints of the gaps
// left, so any prefix covers the range evenly.
func spread(n int) []int {
	if n <= 0 {
		return nil
	}
	seen := make([]bool, n)
	var out []int
	add := func(i int) {
		if i >= 0 && i < n && !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	add(n / 2)
	add(0)
	add(n - 1)
	for den := 4; len(out) < n && den <= 4*n; den *= 2 {
		for num := 1; num < den; num += 2 {
			add(num * (n - 1) / den)
		}
	}
	for i := 0; i < n; i++ {
		add(i)
	}
	return out
}

// FitSet returns the samples Validate fits model name on: the profile
// samples (when the profile is of this model's size) plus the protocol's
// fit rows, read the way chooseMicroBatching picks with m (the model to be
// fitted, its forward profile set).
func FitSet(ctx context.Context, dir, name string, m perf.Model) ([]perf.Sample, error) {
	profiles, _, err := ListDir(dir)
	if err != nil {
		return nil, err
	}
	profName, a, ok := profileFor(name, profiles)
	if !ok {
		return nil, fmt.Errorf("%s: no profile", name)
	}
	prof, err := LoadProfile(ctx, dir, profName)
	if err != nil {
		return nil, err
	}
	rows, err := LoadPlacement(ctx, dir, name)
	if err != nil {
		return nil, err
	}
	var out []perf.Sample
	if math.Abs(a.Params/prof.ParamCount()-1) <= 0.25 {
		out = prof.Samples(profileArch(a))
	}
	pick := func(h []heldRow) []int { return chooseFitRows(h, MaxFitRows) }
	_, held, err := chooseMicroBatching(m, out, rows, a, pick)
	if err != nil {
		return nil, err
	}
	for _, i := range pick(held) {
		out = append(out, held[i].sample)
	}
	return out, nil
}

func heldRows(rows []PlacementRow, arch perf.Arch, mb MicroBatching) []heldRow {
	var held []heldRow
	for _, r := range rows {
		if r.IterS <= 0 {
			continue
		}
		p, err := PlanFromCodeAs(r.ExecPlan, arch, r.Placement.GPUs(), mb)
		if err != nil {
			continue
		}
		cpus := float64(DefaultCPUThreads)
		if r.CPUThreads > 0 {
			cpus = float64(r.CPUThreads)
		}
		held = append(held, heldRow{row: r, family: PlanFamily(r.ExecPlan), sample: perf.Sample{
			Plan: p, Resources: perf.Resources{Placement: r.Placement, CPUsPerGPU: cpus}, IterS: r.IterS}})
	}
	return held
}
