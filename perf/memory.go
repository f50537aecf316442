package perf

import "fmt"

// GiB is 2^30 bytes.
const GiB = 1 << 30

// Memory is the estimate for one plan: the busiest GPU and the busiest
// server's host memory, in bytes, with the parts that make them up.
type Memory struct {
	ModelStates   float64 `json:"model_states_bytes"`    // parameters, gradients, optimizer states on the GPU
	Activations   float64 `json:"activations_bytes"`     // activations kept for the backward pass
	Buffers       float64 `json:"buffers_bytes"`         // logits, communication buckets, CUDA context
	GPU           float64 `json:"gpu_bytes"`             // the sum: per-GPU need
	HostPerServer float64 `json:"host_per_server_bytes"` // offloaded states on the fullest server
}

// cudaReserve is the CUDA context, NCCL and allocator slack per GPU.
const cudaReserve = 3 * GiB

// EstimateMemory follows DESIGN.md: mixed-precision Adam keeps 16 bytes per
// parameter (fp16 weights and grads, fp32 master weights and two moments),
// split by ZeRO stage over the DP size N:
//
//	ZeRO-0 16Ψ, ZeRO-1 4Ψ+12Ψ/N, ZeRO-2 2Ψ+14Ψ/N, ZeRO-3 16Ψ/N,
//	offload ≈ 2Ψ on the GPU (2Ψ/N with ZeRO-3) and 16Ψ/N per GPU on the host,
//
// where Ψ is the parameter count of one TP·PP shard. Activations per layer
// are s·b·h·(34 + 5·a·s/h) bytes for a micro-batch of b (Korthikanti et al.),
// divided by TP (tensor and sequence parallel), or 2·s·b·h per layer plus one
// layer in full with activation checkpointing. The first pipeline stage holds
// min(micro-batches, PP) micro-batches in flight. The activations and the
// logits are multiplied by the type's measured activation factor
// (Arch.ActScale, FitActScale; 1 when not measured).
func EstimateMemory(a Arch, p Plan, pl Placement) Memory {
	m, _ := estimateMemory(a, p, pl)
	return m
}

// estimateMemory is EstimateMemory that also reports the part the
// activation factor scales (activations and logits) before scaling.
func estimateMemory(a Arch, p Plan, pl Placement) (Memory, float64) {
	t, pp, n := float64(p.TP), float64(p.PP), float64(p.DP)
	psi := a.Params / (t * pp)
	var m Memory
	switch {
	case p.Offload && p.ZeRO >= 3:
		m.ModelStates = 2 * psi / n
	case p.Offload:
		m.ModelStates = 2 * psi
	case p.ZeRO == 0:
		m.ModelStates = 16 * psi
	case p.ZeRO == 1:
		m.ModelStates = 4*psi + 12*psi/n
	case p.ZeRO == 2:
		m.ModelStates = 2*psi + 14*psi/n
	default:
		m.ModelStates = 16 * psi / n
	}
	s, h, heads := float64(a.SeqLen), float64(a.Hidden), float64(a.Heads)
	mb := float64(a.GlobalBatch) / (n * float64(p.GA))
	if p.MicroBatch > 0 {
		mb = float64(p.MicroBatch)
	}
	layers := float64(a.Layers) / pp
	perLayer := s * mb * h * (34 + 5*heads*s/h) / t
	if p.Ckpt {
		m.Activations = 2*s*mb*h*layers + perLayer
	} else {
		m.Activations = perLayer * layers
	}
	if p.PP > 1 {
		m.Activations *= float64(min(p.GA, p.PP))
	}
	logits := 4 * s * mb * float64(a.Vocab) / t // fp32 logits on the last stage
	scaled := m.Activations + logits
	m.Activations *= a.actScale()
	logits *= a.actScale()
	buckets := 2 * 0.5e9 // DeepSpeed/Megatron default comm buckets, fp16
	m.Buffers = logits + min(buckets, 4*psi) + cudaReserve
	m.GPU = m.ModelStates + m.Activations + m.Buffers
	if p.Offload {
		perGPU := 16 * psi / n
		fullest := 0
		for _, g := range pl {
			fullest = max(fullest, g)
		}
		if fullest == 0 {
			fullest = p.GPUs()
		}
		m.HostPerServer = perGPU*float64(fullest) + 2*psi/n*float64(fullest) // pinned staging buffers
	}
	return m, scaled
}

// Fits reports whether the estimate fits env's GPU and host memory, and the
// rule that rejects it when not.
func (m Memory) Fits(e Env) error {
	if capGPU := e.GPUMemGB * GiB; m.GPU > capGPU {
		return &RuleError{RuleMemoryGPU, fmt.Sprintf("needs %.1f GiB per GPU (states %.1f, activations %.1f, buffers %.1f), GPU has %.0f GiB",
			m.GPU/GiB, m.ModelStates/GiB, m.Activations/GiB, m.Buffers/GiB, e.GPUMemGB)}
	}
	if capHost := e.HostMemGB * GiB; m.HostPerServer > capHost {
		return &RuleError{RuleMemoryHost, fmt.Sprintf("offload needs %.0f GiB of host memory on a server, server has %.0f GiB", m.HostPerServer/GiB, e.HostMemGB)}
	}
	return nil
}
