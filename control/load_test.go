package control

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAPILoad submits jobs through the API at 100 per second (for 3 s, or
// $REPLAN_LOAD_DURATION, e.g. 60s, in `make bench`) while the loop
// schedules, and checks that no submission failed and every acknowledged
// job is in the store. It prints the achieved rate, submit latency and the
// scheduling round times.
func TestAPILoad(t *testing.T) {
	dur := 3 * time.Second
	if s := os.Getenv("REPLAN_LOAD_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		dur = d
	}
	const rate = 100
	ctx := context.Background()
	cl, d, _, _, _ := startAPI(t, "")
	var (
		mu       sync.Mutex
		acked    []string
		lat      []time.Duration
		failures []string
		rounds   []time.Duration
	)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				r := d.LastRound()
				mu.Lock()
				rounds = append(rounds, r.Duration)
				mu.Unlock()
			}
		}
	}()
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; time.Since(start) < dur; i++ {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			t0 := time.Now()
			spec := strings.Replace(specYAML, "%s", fmt.Sprintf("load-%d", i), 1)
			r, err := cl.Submit(ctx, "load.yaml", []byte(spec))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, err.Error())
				return
			}
			acked = append(acked, r.ID)
			lat = append(lat, time.Since(t0))
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	if len(failures) > 0 {
		t.Fatalf("%d of %d submissions failed, first: %s", len(failures), len(failures)+len(acked), failures[0])
	}
	for _, id := range acked {
		if _, err := d.cfg.Store.GetJob(ctx, id); err != nil {
			t.Fatalf("acknowledged job %s lost: %v", id, err)
		}
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	sort.Slice(rounds, func(a, b int) bool { return rounds[a] < rounds[b] })
	p := func(v []time.Duration, q float64) time.Duration {
		if len(v) == 0 {
			return 0
		}
		return v[min(len(v)-1, int(q*float64(len(v))))]
	}
	t.Logf("load: %d jobs in %s (%.0f/s), no errors, none lost; submit latency p50 %s p99 %s; round time p50 %s p99 %s max %s",
		len(acked), elapsed.Round(time.Millisecond), float64(len(acked))/elapsed.Seconds(), p(lat, 0.5), p(lat, 0.99), p(rounds, 0.5), p(rounds, 0.99), p(rounds, 1))
}
