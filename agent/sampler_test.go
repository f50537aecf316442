package agent

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

type countingBackend struct {
	*FakeBackend
	reads atomic.Int32
}

func (c *countingBackend) GPUs(ctx context.Context) ([]GPU, error) {
	c.reads.Add(1)
	return c.FakeBackend.GPUs(ctx)
}

func TestSamplerRunSamplesAtInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _ := NewFakeBackend("1xA800")
		b := &countingBackend{FakeBackend: f}
		s := NewSampler(b, time.Second, SystemClock{}, slog.New(slog.DiscardHandler))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		synctest.Wait()
		if n := b.reads.Load(); n != 1 {
			t.Errorf("after start: %d reads, want 1 (immediate sample)", n)
		}
		start := s.Snapshot().SampledAt
		time.Sleep(3*time.Second + time.Millisecond)
		synctest.Wait()
		if n := b.reads.Load(); n != 4 {
			t.Errorf("after 3s: %d reads, want 4", n)
		}
		if got := s.Snapshot().SampledAt.Sub(start); got != 3*time.Second {
			t.Errorf("last sample %v after the first, want 3s", got)
		}
		f.InjectXid(0, 48)
		time.Sleep(time.Second)
		synctest.Wait()
		if h := s.Snapshot().Health; len(h) != 1 || h[0].Xid != 48 {
			t.Errorf("health = %+v", h)
		}
		cancel()
		<-done
	})
}
