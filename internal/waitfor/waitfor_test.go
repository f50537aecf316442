package waitfor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestProgressRestartsTheStallWindow(t *testing.T) {
	// The condition needs 30 polls; every poll shows progress, so a stall
	// window of 5 polls never ends the wait.
	n := 0
	err := Progress(context.Background(), "counting", Options{Stall: 50 * time.Millisecond, Poll: 10 * time.Millisecond}, func() error {
		n++
		if n < 30 {
			return fmt.Errorf("at %d", n)
		}
		return nil
	})
	if err != nil || n != 30 {
		t.Fatalf("%v after %d checks", err, n)
	}
}

func TestProgressStallSaysWhatWasLastSeen(t *testing.T) {
	err := Progress(context.Background(), "the job running", Options{Stall: 30 * time.Millisecond, Poll: 5 * time.Millisecond}, func() error {
		return errors.New("queued (no free GPUs)")
	})
	if err == nil || !strings.Contains(err.Error(), "the job running: no progress for 30ms") || !strings.Contains(err.Error(), "last seen: queued (no free GPUs)") {
		t.Fatalf("stall: %v", err)
	}
}

func TestProgressLimitAndContext(t *testing.T) {
	n := 0
	err := Progress(context.Background(), "endless", Options{Stall: time.Hour, Limit: 40 * time.Millisecond, Poll: 5 * time.Millisecond}, func() error {
		n++
		return fmt.Errorf("at %d", n)
	})
	if err == nil || !strings.Contains(err.Error(), "overall limit 40ms") {
		t.Fatalf("limit: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = Progress(ctx, "cancelled", Options{}, func() error { return errors.New("waiting") })
	if err == nil || !strings.Contains(err.Error(), "context canceled") || !strings.Contains(err.Error(), "last seen: waiting") {
		t.Fatalf("cancelled: %v", err)
	}
}
