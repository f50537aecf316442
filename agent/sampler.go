package agent

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// maxHealthEvents bounds the recent health events a Sampler keeps.
const maxHealthEvents = 256

// GPUSnapshot is the latest sampled GPU state.
type GPUSnapshot struct {
	// SampledAt is when the state was read; zero before the first sample.
	SampledAt time.Time `json:"sampled_at"`
	// Backend names the backend ("fake 8xA800", "nvml driver ...", "none").
	Backend string `json:"backend"`
	GPUs    []GPU  `json:"gpus"`
	// Health holds recent Xid/ECC events, oldest first.
	Health []HealthEvent `json:"health"`
	// Error is the last sampling error, if any.
	Error string `json:"error,omitempty"`
}

// Sampler reads a GPUBackend at an interval and keeps the latest state and
// the recent health events. A nil backend yields empty snapshots.
type Sampler struct {
	backend  GPUBackend
	interval time.Duration
	clock    Clock
	log      *slog.Logger

	mu   sync.Mutex
	snap GPUSnapshot
}

// NewSampler returns a sampler; call Run to start sampling.
func NewSampler(backend GPUBackend, interval time.Duration, clock Clock, log *slog.Logger) *Sampler {
	if interval <= 0 {
		interval = time.Second
	}
	name := "none"
	if backend != nil {
		name = backend.Name()
	}
	return &Sampler{backend: backend, interval: interval, clock: clock, log: log,
		snap: GPUSnapshot{Backend: name, GPUs: []GPU{}, Health: []HealthEvent{}}}
}

// Run samples once immediately, then every interval until ctx is done.
func (s *Sampler) Run(ctx context.Context) {
	if s.backend == nil {
		return
	}
	s.SampleOnce(ctx)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.SampleOnce(ctx)
		}
	}
}

// SampleOnce reads the backend once and updates the snapshot.
func (s *Sampler) SampleOnce(ctx context.Context) {
	if s.backend == nil {
		return
	}
	now := s.clock.Now()
	gpus, err := s.backend.GPUs(ctx)
	evs, evErr := s.backend.HealthEvents(ctx, now)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snap.SampledAt = now
	s.snap.Error = ""
	if err != nil {
		s.snap.Error = err.Error()
		s.log.Warn("gpu sample failed", "err", err)
	} else {
		s.snap.GPUs = gpus
	}
	if evErr != nil {
		s.snap.Error = evErr.Error()
	}
	for _, ev := range evs {
		s.log.Warn("gpu health event", "gpu", ev.GPUIndex, "kind", ev.Kind, "xid", ev.Xid)
	}
	s.snap.Health = append(s.snap.Health, evs...)
	if over := len(s.snap.Health) - maxHealthEvents; over > 0 {
		s.snap.Health = append([]HealthEvent{}, s.snap.Health[over:]...)
	}
}

// Snapshot returns a copy of the latest state.
func (s *Sampler) Snapshot() GPUSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.snap
	c.GPUs = append([]GPU{}, s.snap.GPUs...)
	c.Health = append([]HealthEvent{}, s.snap.Health...)
	return c
}
