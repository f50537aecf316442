package perf

import (
	"encoding/json"
	"fmt"
	"math"
)

// Env is the hardware a plan runs on, as the performance model sees it.
// Bandwidths are effective (what NCCL/PCIe transfers achieve, not the
// nominal link rate) in GB/s (1e9 bytes per second).
type Env struct {
	GPUsPerServer int     `json:"gpus_per_server"`
	GPUMemGB      float64 `json:"gpu_mem_gb"`      // usable HBM per GPU, GiB
	HostMemGB     float64 `json:"host_mem_gb"`     // host memory per server, GiB
	CPUsPerServer int     `json:"cpus_per_server"` // CPU cores per server
	IntraGBps     float64 `json:"intra_gbps"`      // NVLink/NVSwitch collective bandwidth inside a server
	NICs          int     `json:"nics"`            // RDMA NICs per server, each serving GPUsPerServer/NICs GPUs
	NICGBps       float64 `json:"nic_gbps"`        // effective bandwidth of one NIC
	SpineFactor   float64 `json:"spine_factor"`    // cross-rack share of the in-rack bandwidth (1 = non-blocking, 0.5 = 2:1 oversubscribed)
	PCIeGBps      float64 `json:"pcie_gbps"`       // GPU<->host copy bandwidth (offload)
}

// A800 is the reference server of the Morphling data: 8 × A800 80 GB with
// NVLink, 4 × 200 Gb/s RDMA NICs (one per two GPUs, 100 GB/s in all),
// 96 cores, 1.6 TB RAM. The effective collective bandwidths are the ones
// measured on that cluster by all-reduce over 8 GPUs in one server and over
// one NIC between servers (see docs/perf.md for how they were obtained).
var A800 = Env{
	GPUsPerServer: 8,
	GPUMemGB:      80,
	HostMemGB:     1600,
	CPUsPerServer: 96,
	IntraGBps:     150,
	NICs:          4,
	NICGBps:       10.7,
	SpineFactor:   1,
	PCIeGBps:      20,
}

// Tier is how widely a placement spreads: one server, one rack, or racks.
type Tier int

// Tiers from narrowest to widest.
const (
	TierServer Tier = iota
	TierRack
	TierCrossRack
)

func (t Tier) String() string {
	switch t {
	case TierServer:
		return "server"
	case TierRack:
		return "rack"
	case TierCrossRack:
		return "cross-rack"
	}
	return "unknown"
}

// Resources are what a plan runs on: GPUs per server, whether those servers
// span racks, and CPU cores per GPU (for the offloaded optimizer).
type Resources struct {
	Placement  Placement `json:"placement"`
	CrossRack  bool      `json:"cross_rack"`
	CPUsPerGPU float64   `json:"cpus_per_gpu"`
}

// Tier reports the widest link the placement crosses.
func (r Resources) Tier() Tier {
	switch {
	case r.Placement.Servers() <= 1:
		return TierServer
	case r.CrossRack:
		return TierCrossRack
	default:
		return TierRack
	}
}

// Stray reports whether a placement spanning servers has a server
// holding a GPU count that is not a multiple of its GPUs per NIC (with
// 2 GPUs per NIC: an odd count): a GPU of the job without its NIC
// partner. A data-parallel collective over such a placement is priced at
// Params.KUneven (model.go).
func (e Env) Stray(pl Placement) bool {
	if len(pl) < 2 {
		return false
	}
	per := max(e.GPUsPerServer/max(e.NICs, 1), 1)
	for _, g := range pl {
		if g%per != 0 {
			return true
		}
	}
	return false
}

// nodeGBps is the inter-server bandwidth of a server that has g GPUs of the
// job: the NICs those GPUs sit behind, scaled down across racks.
func (e Env) nodeGBps(g int, crossRack bool) float64 {
	per := e.GPUsPerServer / max(e.NICs, 1)
	if per < 1 {
		per = 1
	}
	nics := min((g+per-1)/per, max(e.NICs, 1))
	bw := float64(nics) * e.NICGBps
	if crossRack && e.SpineFactor > 0 {
		bw *= e.SpineFactor
	}
	return bw
}

// overlap is Morphling's f_k(x, y) = (x^k + y^k)^(1/k): x+y at k = 1,
// max(x, y) as k grows. Computed scaled by the larger term so large k does
// not overflow.
func overlap(k, x, y float64) float64 {
	m, s := x, y
	if s > m {
		m, s = s, m
	}
	if m <= 0 {
		return 0
	}
	if s <= 0 {
		return m
	}
	if k == 1 {
		return m + s
	}
	// m·(1 + (s/m)^k)^(1/k) through Exp and Log: math.Pow's general path
	// was half of a fit's time
	t := math.Exp(k * math.Log(s/m))
	return m * math.Exp(math.Log1p(t)/k)
}

// overlapMemo remembers the last inputs and result of each of a shape's
// three overlaps (shape.evalMemo): the synchronisation's, the offload
// copies' and the CPU step's.
type overlapMemo [3]struct {
	k, x, y, f float64
	set        bool
}

// overlap is overlap(k, x, y), answered from slot i of om when its last
// call had the same inputs (bit for bit: the same function of the same
// numbers). A nil om computes it.
func (om *overlapMemo) overlap(i int, k, x, y float64) float64 {
	if om == nil {
		return overlap(k, x, y)
	}
	e := &om[i]
	if e.set && same(e.k, k) && same(e.x, x) && same(e.y, y) {
		return e.f
	}
	f := overlap(k, x, y)
	e.k, e.x, e.y, e.f, e.set = k, x, y, f, true
	return f
}

// same reports whether a and b are the same bits (-0 is not 0).
func same(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

// MarshalJSON writes a tier by name ("server", "rack", "cross-rack").
func (t Tier) MarshalJSON() ([]byte, error) { return json.Marshal(t.String()) }

// UnmarshalJSON reads a tier by name, or by number as older stores and
// clients wrote it.
func (t *Tier) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		*t = Tier(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("tier: want server, rack or cross-rack: %w", err)
	}
	for _, c := range []Tier{TierServer, TierRack, TierCrossRack} {
		if s == c.String() {
			*t = c
			return nil
		}
	}
	return fmt.Errorf("tier %q: want server, rack or cross-rack", s)
}
