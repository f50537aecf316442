package perf

import (
	"errors"
	"fmt"
	"math"
)

// Params are the fittable parameters of the iteration-time model: the
// seven of Morphling's Appendix A (Table 5), then five the A800 data
// needs, each a physical cost the paper's formula leaves out (k_uneven,
// k_mp, k_host, k_tp, k_stage), and three that make compute depend on the
// micro-batch and on a measured speed (k_launch, k_fwd, k_lo;
// docs/perf.md).
type Params struct {
	KBwd    float64 `json:"k_bwd"`     // backward = k_bwd · forward
	KSync   float64 `json:"k_sync"`    // overlap degree of backward and DP gradient sync
	KOpt    float64 `json:"k_opt"`     // GPU optimizer seconds per 1e9 parameters on a GPU
	KOptOff float64 `json:"k_opt_off"` // CPU optimizer seconds per 1e9 parameters per core (ZeRO-Offload)
	KOff    float64 `json:"k_off"`     // overlap degree of DP sync and GPU<->host copies
	KSwap   float64 `json:"k_swap"`    // overlap degree of the CPU step and the copies
	KConst  float64 `json:"k_const"`   // constant per-iteration overhead, seconds
	// KUneven is the seconds an iteration spends, in its optimizer-step
	// phase, when its data-parallel collective spans servers and one of
	// them holds a GPU count that is not a multiple of its GPUs per NIC
	// (Env.Stray): the ranks wait at the step for the one whose GPU has no
	// job partner on its NIC's PCIe switch. It does not grow with gradient
	// bytes (the k_stray it replaces, a bandwidth applied to them, fitted
	// 1.1 to 21.4 GB/s on identical servers). It is a term of the model
	// type, not of the cluster: fitted on each A800 table alone it is
	// 0.017 s (bert), 0.025 (gpt2) and 0.18 (t5) on the same servers, and
	// fitted jointly it moved 5× from one leave-one-out fold to the next
	// (docs/perf.md, Uneven placements). With ZeRO-Offload the wait runs
	// while the host does its CPU step, so such a plan pays the longer of
	// the two.
	KUneven float64 `json:"k_uneven"`
	// KStray is the bandwidth the uneven-placement cost was priced at
	// before KUneven; read from old model files and ignored.
	KStray float64 `json:"k_stray,omitempty"`
	// KMP is the compute of a model-parallel plan (TP > 1 or PP > 1)
	// relative to the profiled data-parallel forward and backward: such
	// plans run another engine's layers (tensor-split GEMMs, per-stage
	// schedules) that the data-parallel profile does not time. 1 = the
	// same kernels; fitted like the others (0 in an old model file: the
	// default).
	KMP float64 `json:"k_mp"`
	// KHost is the seconds per 1e9 parameters that one server's host
	// spends on the offloaded optimizer states of its GPUs (ZeRO-Offload):
	// the CPU Adam and the copies stream the fp32 states through the
	// server's memory, which all its GPUs share, so a server holding g of
	// the job's N GPUs moves Ψ·g/N parameters' states however many cores
	// it uses.
	KHost float64 `json:"k_host"`
	// KTP is the slowdown of the tensor-parallel all-reduces against the
	// NVLink bus bandwidth (1 = Env.IntraGBps): they are issued per layer,
	// block the layer's compute and run at the bus bandwidth of
	// mid-sized messages, well below the large-message figure.
	KTP float64 `json:"k_tp"`
	// KStage is the seconds each pipeline step on the critical path
	// spends at a stage boundary beyond the bytes it sends: the
	// point-to-point handshake and the engine's schedule step between
	// stages. A term of the model type's pipeline engine, not of the
	// cluster: t5's rows grow by 0.045-0.06 s per stage at every TP
	// degree, gpt2's by 0.008-0.015 s, llama7's by 0-0.05 s on the same
	// servers, and fitted jointly it moved 2.8× between leave-one-out
	// folds. 0 in DefaultParams (an unfitted model prices no such cost); a
	// fit starts it at 1 ms.
	KStage float64 `json:"k_stage"`
	// KLaunch is the fixed forward time of one micro-batch per layer,
	// seconds: the launches and the under-filled kernels of a small
	// micro-batch, which a GPU does not hide until the micro-batch
	// saturates it (the forward of a micro-batch of mb samples on one
	// stage is k_fwd·β·mb/(TP·PP) + k_launch·layers/PP, the backward
	// k_bwd times that). A property of the GPU and its software; 0 in an
	// old model file (no such cost). The profile's per-iteration forward
	// overhead α holds it at GA 1, so it is taken out of α.
	KLaunch float64 `json:"k_launch"`
	// KFwd scales the forward profile (α and β). Fit holds it at its
	// start (1) unless FitOptions.FreeForward: a model type whose forward
	// time was never measured (DefaultForward, an architecture's FLOPs at
	// a guessed efficiency) learns its compute speed from iteration times.
	// 0 in an old model file: 1.
	KFwd float64 `json:"k_fwd"`
	// KHop is the seconds each reduction operation of a data-parallel
	// gradient synchronisation costs per server beyond the first that its
	// group spans, whatever its bytes: an operation waits for the last of
	// its ranks, and the spread of their arrival grows with the servers.
	// DeepSpeed's ZeRO-2 reduces each gradient bucket with one reduce per
	// rank (to the rank that owns that partition), N operations where an
	// all-reduce is one, so its multi-server rows pay N times what plain
	// data parallelism pays (bert's ZeRO-2 rows grow by 10.8 ms per server
	// from 2 to 8 servers, its all-reduce rows by 3.1 ms). A property of
	// the cluster's network and collective library: fitted on bert, gpt2
	// and t5 alone it is 0.95, 1.04 and 0.96 ms, jointly over the
	// leave-one-out folds 1.18-1.66 ms. 0 in DefaultParams and in an old
	// model file (no such cost); HopUnseen in a fit with no ZeRO-2 sample
	// across servers.
	KHop float64 `json:"k_hop"`
	// KLO is the overlap exponent of a micro-batch's launches and its
	// compute: the forward of a micro-batch on one stage is
	// f_k_lo(k_fwd·β·mb/(TP·PP), k_launch·layers/PP). 1 adds the two (a
	// trainer that launches its kernels and then waits for them, as the
	// end-to-end tests' CPU trainer does); larger hides the launches
	// behind a large micro-batch's GPU work (eager PyTorch on an H200:
	// bert's micro-batch costs ~40 ms from mb 1 to 8, then grows with
	// mb). A property of the GPU and its software (asynchronous kernel
	// launch), never below 1. 0 in an old model file: 1. A fit searches
	// it only when its samples show three micro-batch sizes of one plan
	// on one placement (LaunchOverlapIdentified), else holds it at 1.
	KLO float64 `json:"k_lo"`
}

// NumParams is the number of fittable parameters.
const NumParams = 16

// ParamNames lists the parameters in vector order.
var ParamNames = [NumParams]string{"k_bwd", "k_sync", "k_opt", "k_opt_off", "k_off", "k_swap", "k_const", "k_uneven", "k_mp", "k_host", "k_tp", "k_stage", "k_launch", "k_fwd", "k_hop", "k_lo"}

// HardwareParams marks the parameters that are properties of the cluster
// (its GPUs, hosts, links and software), not of a model type: k_sync,
// k_opt, k_off, k_swap, k_host, k_tp, k_launch, k_hop. Fitted on different model
// types of the same cluster they should agree within a factor of 2, and
// FitShared fits them jointly over several model types (a term the
// samples do not pin is held at its default: FitSharedIdentified). The
// others describe the model type: k_bwd, k_mp and k_fwd its own kernels,
// k_const its fixed per-iteration work, k_opt_off its CPU optimizer step
// (the A800 tables put it at 2.3-4.7 s per 1e9 parameters and core for
// bert, gpt2 and t5 and at 27 for llama7b on the same servers), k_uneven
// its wait on uneven placements (0.017-0.18 s) and k_stage its pipeline
// engine's step (0.007-0.048 s): each varies between model types on
// identical servers, so each model's own samples fit it. k_lo, the launch
// overlap, is a property of the GPU's software too, but each fit takes it
// from its own samples: no shared table holds the three micro-batch
// sizes that identify it (LaunchOverlapIdentified), so a joint fit would
// have nothing to pool.
var HardwareParams = [NumParams]bool{1: true, 2: true, 4: true, 5: true, 9: true, 10: true, 12: true, 14: true}

// WithHardware returns p with the hardware parameters (HardwareParams)
// taken from hw.
func (p Params) WithHardware(hw Params) Params {
	v, h := p.Vector(), hw.Vector()
	for i := range v {
		if HardwareParams[i] {
			v[i] = h[i]
		}
	}
	out := ParamsFromVector(v)
	out.KStray = p.KStray
	return out
}

// Vector returns the parameters in ParamNames order.
func (p Params) Vector() [NumParams]float64 {
	return [NumParams]float64{p.KBwd, p.KSync, p.KOpt, p.KOptOff, p.KOff, p.KSwap, p.KConst, p.KUneven, p.KMP, p.KHost, p.KTP, p.KStage, p.KLaunch, p.KFwd, p.KHop, p.KLO}
}

// ParamsFromVector is the inverse of Vector.
func ParamsFromVector(v [NumParams]float64) Params {
	return Params{KBwd: v[0], KSync: v[1], KOpt: v[2], KOptOff: v[3], KOff: v[4], KSwap: v[5], KConst: v[6], KUneven: v[7], KMP: v[8], KHost: v[9], KTP: v[10], KStage: v[11], KLaunch: v[12], KFwd: v[13], KHop: v[14], KLO: v[15]}
}

// DefaultParams is the starting point of every fit and the prior the fit is
// gently pulled towards when samples do not identify a parameter.
var DefaultParams = Params{KBwd: 2, KSync: 2, KOpt: 0.05, KOptOff: 1, KOff: 2, KSwap: 2, KConst: 0.01, KUneven: 0.1, KMP: 1, KHost: 0.25, KTP: 1, KFwd: 1, KLO: 1}

// Forward is the profiled forward pass of a model type on one GPU: the
// forward of an iteration processing n samples per GPU takes Alpha + Beta·n
// seconds. Alpha is a per-iteration overhead (it does not grow with
// gradient-accumulation steps: the A800 ga rows show none), Beta the time
// per sample. Tensor parallelism divides the Beta part by TP, pipeline
// stages by PP.
type Forward struct {
	Alpha float64 `json:"alpha_s"`
	Beta  float64 `json:"beta_s_per_sample"`
}

// Model predicts iteration times for one model type.
type Model struct {
	Arch    Arch    `json:"arch"`
	Forward Forward `json:"forward"`
	Params  Params  `json:"params"`
	Env     Env     `json:"env"`
	// Space is what the job's framework runs (Rank and Best offer nothing
	// else); the zero Space is every plan.
	Space Space `json:"space,omitzero"`
}

// Breakdown is a predicted iteration split into the phases of Appendix A.
// All times are seconds.
type Breakdown struct {
	Fwd    float64 `json:"fwd_s"`     // forward (all micro-batches, pipeline fill included)
	Bwd    float64 `json:"bwd_s"`     // backward (recompute included)
	CommDP float64 `json:"comm_dp_s"` // gradient synchronisation
	CommTP float64 `json:"comm_tp_s"` // tensor-parallel activations
	CommPP float64 `json:"comm_pp_s"` // pipeline boundaries
	Gather float64 `json:"gather_s"`  // ZeRO parameter all-gather after the step
	Opt    float64 `json:"opt_s"`     // optimizer step (GPU or CPU)
	Off    float64 `json:"off_s"`     // GPU<->host copies (offload)
	Tcc    float64 `json:"tcc_s"`     // compute and communication, overlapped
	Too    float64 `json:"too_s"`     // optimizer and offload, overlapped
	Iter   float64 `json:"iter_s"`    // whole iteration
	// InterServer is the part of the iteration during which the job uses
	// links between servers (its DP and PP traffic when they cross servers):
	// what CASSINI's circles are made of.
	InterServer float64 `json:"inter_server_s"`
	Tier        Tier    `json:"tier"`
	// Stray is set when the DP collective spans servers and one of them
	// holds a GPU count that is not a multiple of its GPUs per NIC
	// (priced at Params.KUneven in the optimizer phase, overlapped with
	// the CPU step under offload; Env.Stray).
	Stray bool `json:"stray,omitempty"`
}

// Throughput is samples per second for a global batch of batch samples.
func (b Breakdown) Throughput(batch int) float64 {
	if b.Iter <= 0 {
		return 0
	}
	return float64(batch) / b.Iter
}

const bytesPerParam16 = 2.0 // fp16/bf16 gradients and parameters on the wire

// ErrPlanPlacement is returned when a plan's GPU count does not match the
// placement it is priced on.
var ErrPlanPlacement = errors.New("plan GPUs do not match placement")

// Predict prices plan p on resources r. It needs only DP·TP·PP to equal the
// placement's GPUs; validity rules are Check's job, so measured
// configurations that break a rule can still be priced.
func (m Model) Predict(p Plan, r Resources) (Breakdown, error) {
	s, err := m.prepare(p, r)
	if err != nil {
		return Breakdown{}, err
	}
	out := s.eval(m.Params)
	if math.IsNaN(out.Iter) || math.IsInf(out.Iter, 0) {
		return Breakdown{}, fmt.Errorf("predict %s on %s: non-finite iteration time", p, r.Placement)
	}
	return out, nil
}

// shape holds everything about a (plan, resources) pair that does not depend
// on the fittable parameters, so a fit evaluates thousands of parameter
// vectors cheaply.
type shape struct {
	ga, pp           float64 // GA; PP
	fixed            float64 // per-iteration forward overhead (Forward.Alpha)
	ckpt, offload    bool
	mp               bool // TP > 1 or PP > 1: compute scaled by Params.KMP
	commDP, gather   float64
	commTP, commPP   float64
	shardG           float64 // billions of parameters the optimizer updates per GPU
	cpus, off        float64
	hostG            float64 // offload: billions of parameters whose states the busiest server's host moves
	dpCross, ppCross bool
	tier             Tier
	// stray: the DP collective spans servers and one of them holds a GPU
	// count that is not a multiple of GPUs per NIC (priced at
	// Params.KUneven).
	stray bool
	// beta1 is the profile's per-micro-batch forward on one stage
	// (β·mb/(TP·PP), before k_fwd); launchN the layers a micro-batch
	// crosses on one stage (priced at k_launch each); layersAll every
	// layer (the part of α that is k_launch at GA 1).
	beta1, launchN, layersAll float64
	// hops: the DP synchronisation's reduction operations times the
	// servers beyond the first its group spans (priced at Params.KHop)
	hops float64
}

func (m Model) prepare(p Plan, r Resources) (shape, error) {
	return m.prepareWith(p, r, nil)
}

// serverOfRank maps each rank (GPU in placement order) to its server.
func serverOfRank(pl Placement) []int {
	server := make([]int, 0, pl.GPUs())
	for s, g := range pl {
		for i := 0; i < g; i++ {
			server = append(server, s)
		}
	}
	return server
}

// prepareWith is prepare with the placement's rank-to-server map computed
// once by the caller (nil: computed here).
func (m Model) prepareWith(p Plan, r Resources, server []int) (shape, error) {
	pl := r.Placement
	if p.GPUs() != pl.GPUs() || p.DP < 1 || p.TP < 1 || p.PP < 1 || p.GA < 1 {
		return shape{}, fmt.Errorf("%w: %s on %s", ErrPlanPlacement, p, pl)
	}
	a, e := m.Arch, m.Env
	d, t, pp := float64(p.DP), float64(p.TP), float64(p.PP)
	ga := float64(p.GA)
	b := float64(a.GlobalBatch)
	if p.MicroBatch > 0 {
		// the plan says what each GPU processes: a run measured at another
		// global batch than the model type's (a profile taken at batch 8
		// for a job at 16) is priced at its own batch
		b = float64(p.MicroBatch) * ga * d
	}
	mb := b / (d * ga) // samples per micro-batch (fractional for uneven data rows)
	s := shape{ga: ga, pp: pp, ckpt: p.Ckpt, offload: p.Offload, tier: r.Tier(), mp: p.TP > 1 || p.PP > 1}
	s.beta1 = m.Forward.Beta * mb / t / pp
	s.fixed = m.Forward.Alpha
	s.launchN = float64(max(a.Layers, 1)) / pp
	s.layersAll = float64(max(a.Layers, 1))

	// Communication volumes in bytes (Appendix A.1), per GPU.
	psi := a.Params / (t * pp) // parameters of one TP·PP shard
	var vDP, vGather float64
	if p.DP > 1 {
		frac := (d - 1) / d
		switch {
		case p.ZeRO == 0:
			vDP = 2 * frac * psi * bytesPerParam16
		case p.ZeRO == 1:
			vDP = 2 * frac * psi * bytesPerParam16
			vGather = frac * psi * bytesPerParam16
		case p.ZeRO == 2:
			vDP = frac * psi * bytesPerParam16 // reduce-scatter
			vGather = frac * psi * bytesPerParam16
		default: // ZeRO-3: reduce-scatter and the backward all-gather overlap
			// the backward; the forward all-gather waits in front of compute
			vDP = 2 * frac * psi * bytesPerParam16
			vGather = frac * psi * bytesPerParam16
		}
	}
	hsl := float64(a.SeqLen) * float64(a.Hidden)
	var vTP, vPP float64
	if p.TP > 1 {
		// per micro-batch and stage: the stage's layers; on the critical
		// path as often as the stage's compute (GA+PP−1 pipeline steps)
		vTP = 8 * (t - 1) * mb * hsl * float64(a.Layers) / pp / t * bytesPerParam16 * (ga + pp - 1)
		if p.Ckpt {
			// the recomputed forward repeats its two all-reduces per
			// layer: six per layer and micro-batch instead of four
			vTP *= 1.5
		}
	}
	if p.PP > 1 {
		// an activation forward and its gradient back per pipeline step,
		// GA+PP−1 steps on the critical path
		vPP = 2 * mb * hsl / t * bytesPerParam16 * (ga + pp - 1)
	}
	if server == nil {
		server = serverOfRank(pl)
	}
	dpGBps, dpCross, ppGBps, ppCross := m.linkBandwidths(p, r, server)
	s.dpCross, s.ppCross = dpCross, ppCross
	if dpCross && vDP > 0 && e.Stray(pl) {
		s.stray = true
	}
	if vDP > 0 && dpCross {
		// one operation per gradient bucket; ZeRO-2 reduces each bucket
		// with one reduce per rank (DeepSpeed's reduce-scatter)
		ops := math.Max(psi/reduceBucketParams, 1)
		if p.ZeRO == 2 {
			ops *= d
		}
		s.hops = ops * float64(dpSpan(p, server)-1)
	}
	if vDP > 0 {
		s.commDP = vDP / (dpGBps * 1e9)
		s.gather = vGather / (dpGBps * 1e9)
	}
	if vTP > 0 {
		// A TP group inside one server runs at NVLink speed; one split
		// over servers (Check forbids it, a measured run may still have
		// it) crosses the narrowest server's NICs.
		tpGBps := e.IntraGBps
		if tpSplit(p, server) {
			tpGBps = math.Min(tpGBps, e.nodeGBps(pl.MinPerServer(), r.CrossRack))
		}
		s.commTP = vTP / (tpGBps * 1e9)
	}
	if vPP > 0 {
		s.commPP = vPP / (ppGBps * 1e9)
	}
	s.shardG = psi / 1e9
	if p.ZeRO > 0 {
		s.shardG /= d
	}
	if p.Offload {
		s.cpus = r.CPUsPerGPU
		if s.cpus <= 0 {
			s.cpus = 1
		}
		s.off = 2 * bytesPerParam16 * psi / d / (e.PCIeGBps * 1e9) // grads down, params up
		gmax := 0
		for _, g := range pl {
			gmax = max(gmax, g)
		}
		s.hostG = psi / 1e9 * float64(min(gmax, p.DP)) / d
	}
	return s, nil
}

// loAdditive is the largest k_lo priced as the sum of a micro-batch's
// launches and compute: 1, and the 1 + 10⁻⁶ a fit's logarithmic search
// maps 1 to (logVec), so a model whose k_lo is 1 prices the same bits
// as before the term (an old model file's 0 included).
const loAdditive = 1 + 2e-6

// eval applies Appendix A's combination rules with parameters k.
func (s *shape) eval(k Params) Breakdown { return s.evalMemo(k, nil) }

// evalMemo is eval with its overlaps answered from om when their inputs
// are those of om's last call (nil: computed): a fit's finite-difference
// gradient moves one parameter at a time, which leaves most overlaps as
// they were. The same arithmetic either way, so the same bits.
func (s *shape) evalMemo(k Params, om *overlapMemo) Breakdown {
	out := Breakdown{CommDP: s.commDP, Gather: s.gather, CommTP: s.commTP, CommPP: s.commPP, Tier: s.tier}
	commDP, gather := s.commDP, s.gather
	// the synchronisation overlapping the backward waits at each of its
	// operations (k_hop); the copies and the parameter all-gather after
	// the step do not
	syncDP := commDP + k.KHop*s.hops
	out.CommDP = syncDP
	uneven := 0.0
	if s.stray {
		uneven = k.KUneven
		out.Stray = true
	}
	kf := k.KFwd
	if kf <= 0 {
		kf = 1
	}
	// A micro-batch's forward: the profile's per-sample part and a fixed
	// part per layer (k_launch), which the profile's α holds at GA 1.
	launch := k.KLaunch * s.launchN
	fixed := math.Max(kf*s.fixed-k.KLaunch*s.layersAll, 0)
	// Checkpointing recomputes the forward inside the backward. The A800
	// data shows that time is not hidden by the gradient sync (gc − ga is
	// one forward on every placement), so it sits outside the overlap.
	f1 := kf*s.beta1 + launch
	if k.KLO > loAdditive {
		// the host launches while the GPU runs: the launches hide
		// behind a large micro-batch's compute (k_lo)
		f1 = overlap(k.KLO, kf*s.beta1, launch)
	}
	if s.mp {
		kmp := k.KMP
		if kmp <= 0 {
			kmp = DefaultParams.KMP
		}
		f1 *= kmp
	}
	b1 := k.KBwd * f1
	rc := 0.0
	if s.ckpt {
		rc = f1
	}
	kt := k.KTP
	if kt <= 0 {
		kt = DefaultParams.KTP
	}
	commTP := s.commTP * kt
	out.CommTP = commTP
	commPP := s.commPP
	if s.pp > 1 {
		commPP += k.KStage * (s.ga + s.pp - 2)
		out.CommPP = commPP
	}
	if s.pp == 1 {
		out.Fwd = fixed + s.ga*f1
		out.Bwd = s.ga * (b1 + rc)
		out.Tcc = fixed + s.ga*(f1+rc) + (s.ga-1)*b1 + om.overlap(0, k.KSync, b1, syncDP) + commTP
	} else {
		fill := s.ga + s.pp - 1
		out.Fwd = fixed + f1*fill
		out.Bwd = (b1 + rc) * fill
		out.Tcc = out.Fwd + rc*fill + om.overlap(0, k.KSync, b1*fill, syncDP) + commTP + commPP
	}
	if s.offload {
		out.Opt = k.KOptOff*s.shardG/s.cpus + k.KHost*s.hostG
		out.Off = s.off
		// the ranks wait for the stray one while the host runs its CPU
		// step: t5's offload rows on uneven placements run at their even
		// neighbours' speed (35 0.885 s, 44 0.846 s) where its other
		// plans are 0.2-0.3 s slower
		out.Too = om.overlap(1, k.KOff, commDP+gather, s.off) + math.Max(om.overlap(2, k.KSwap, out.Opt, s.off), uneven)
	} else {
		out.Opt = k.KOpt * s.shardG
		out.Too = out.Opt + gather + uneven
	}
	out.Iter = out.Tcc + out.Too + k.KConst
	if s.dpCross {
		out.InterServer += commDP + gather
	}
	if s.ppCross {
		out.InterServer += commPP
	}
	return out
}

// tpSplit reports whether a tensor-parallel group of p (TP consecutive
// ranks, as Megatron lays them out) spans servers.
func tpSplit(p Plan, server []int) bool {
	if p.TP <= 1 {
		return false
	}
	for g := 0; g+p.TP <= len(server); g += p.TP {
		if server[g] != server[g+p.TP-1] {
			return true
		}
	}
	return false
}

// linkBandwidths returns the effective bandwidth of the DP and PP
// collectives and whether they cross servers. Ranks are laid out as
// Megatron does (TP fastest, then DP, then PP) over the placement's
// servers in order. A DP group inside one server runs at NVLink speed; one
// that spans servers is limited by the server whose NICs carry the most DP
// groups per NIC. A pipeline boundary between servers runs at the
// inter-server bandwidth of the narrowest server.
func (m Model) linkBandwidths(p Plan, r Resources, server []int) (dpGBps float64, dpCross bool, ppGBps float64, ppCross bool) {
	e := m.Env
	pl := r.Placement
	rank := func(pi, di, ti int) int { return pi*p.DP*p.TP + di*p.TP + ti }

	dpGBps, ppGBps = e.IntraGBps, e.IntraGBps
	if p.DP > 1 {
		crossing := make([]int, len(pl)) // DP groups spanning servers with a member on each server
		for pi := 0; pi < p.PP; pi++ {
			for ti := 0; ti < p.TP; ti++ {
				first := server[rank(pi, 0, ti)]
				spans := false
				for di := 1; di < p.DP; di++ {
					if server[rank(pi, di, ti)] != first {
						spans = true
						break
					}
				}
				if !spans {
					continue
				}
				dpCross = true
				last := -1
				for di := 0; di < p.DP; di++ {
					// ranks of a group rise with di, so its servers come in order
					if s := server[rank(pi, di, ti)]; s != last {
						crossing[s]++
						last = s
					}
				}
			}
		}
		if dpCross {
			dpGBps = math.Inf(1)
			for s, n := range crossing {
				if n == 0 {
					continue
				}
				bw := e.nodeGBps(pl[s], r.CrossRack) / float64(n)
				dpGBps = math.Min(dpGBps, bw)
			}
			dpGBps = math.Min(dpGBps, e.IntraGBps)
		}
	}
	if p.PP > 1 {
		for pi := 1; pi < p.PP; pi++ {
			for ti := 0; ti < p.TP; ti++ {
				for di := 0; di < p.DP; di++ {
					if server[rank(pi, di, ti)] != server[rank(pi-1, di, ti)] {
						ppCross = true
					}
				}
			}
		}
		if ppCross {
			ppGBps = e.nodeGBps(pl.MinPerServer(), r.CrossRack)
		}
	}
	return dpGBps, dpCross, ppGBps, ppCross
}

// reduceBucketParams is the gradient bucket of the DP synchronisation, in
// parameters: DeepSpeed's default reduce_bucket_size (5e8 elements, the
// 1 GB of fp16 buckets EstimateMemory reserves).
const reduceBucketParams = 5e8

// dpSpan is the most servers one DP group of p spans (ranks laid out as
// linkBandwidths lays them: TP fastest, then DP, then PP).
func dpSpan(p Plan, server []int) int {
	most := 1
	for pi := 0; pi < p.PP; pi++ {
		for ti := 0; ti < p.TP; ti++ {
			n, last := 0, -1
			for di := 0; di < p.DP; di++ {
				// ranks of a group rise with di, so its servers come in order
				if s := server[pi*p.DP*p.TP+di*p.TP+ti]; s != last {
					n++
					last = s
				}
			}
			most = max(most, n)
		}
	}
	return most
}
