package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/sched"
)

// RunAll simulates trace under every policy, concurrently (each run is
// independent and deterministic), and returns the results in the order of
// policies. A policy that fails does not cost the others their results:
// its Result carries only its name and Error, and the returned error
// joins every failure (nil when all ran).
func RunAll(ctx context.Context, trace []dataset.WorkloadJob, models *Models, policies []sched.Policy, cfg Config) ([]*Result, error) {
	out := make([]*Result, len(policies))
	errs := make([]error, len(policies))
	var wg sync.WaitGroup
	for i, p := range policies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = Run(ctx, trace, models, p, cfg)
		}()
	}
	wg.Wait()
	var failed []error
	for i, err := range errs {
		if err != nil {
			out[i] = &Result{Policy: policies[i].Name(), Error: err.Error(), Classes: map[string]ClassMetrics{}}
			failed = append(failed, fmt.Errorf("policy %s: %w", policies[i].Name(), err))
		}
	}
	return out, errors.Join(failed...)
}

// Report is the JSON form of a comparison (the contract of
// `replan sim --json`).
type Report struct {
	Policies []*Result `json:"policies"`
	// Oracle, with `sim --both`, is the same run with the policies shown
	// the whole measured tables (Config.Oracle).
	Oracle []*Result `json:"oracle,omitempty"`
}

type column struct {
	title string
	get   func(ClassMetrics) float64
	hours bool
}

var columns = []column{
	{"avg JCT (h)", func(m ClassMetrics) float64 { return m.AvgJCT }, true},
	{"p50 JCT (h)", func(m ClassMetrics) float64 { return m.P50JCT }, true},
	{"p99 JCT (h)", func(m ClassMetrics) float64 { return m.P99JCT }, true},
	{"makespan (h)", func(m ClassMetrics) float64 { return m.Makespan }, true},
	{"queue (h)", func(m ClassMetrics) float64 { return m.Queue }, true},
}

// WriteTable prints results as one table in the manner of the Morphling
// paper's Table 4: each time column with its ratio to the best policy of
// that column (and class) in parentheses, so "(2.50×)" reads "2.5 times
// worse than the best". Restarts, SLA violations (job-hours a guaranteed
// job ran below its promised throughput) and GPU utilisation follow. When
// the trace has guaranteed jobs, each policy gets an "all", "guar." and
// "BE" row.
func WriteTable(w io.Writer, results []*Result) error {
	var buf strings.Builder
	if err := writeTable(&buf, results); err != nil {
		return err
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	_, err := io.WriteString(w, strings.Join(lines, "\n")+"\n")
	return err
}

func writeTable(w io.Writer, results []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	classes := []string{""}
	for _, r := range results {
		if r.Classes["guaranteed"].Jobs > 0 {
			classes = []string{"", "guaranteed", "best-effort"}
			break
		}
	}
	head := []string{"policy", "class"}
	for _, c := range columns {
		head = append(head, c.title)
	}
	head = append(head, "restarts", "SLA viol. (h)", "GPU util", "")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	metric := func(r *Result, class string) ClassMetrics {
		if class == "" {
			return r.ClassMetrics
		}
		return r.Classes[class]
	}
	best := map[string][]float64{}
	for _, cl := range classes {
		b := make([]float64, len(columns))
		for i := range b {
			b[i] = math.Inf(1)
		}
		for _, r := range results {
			m := metric(r, cl)
			if r.Error != "" || m.Finished == 0 {
				continue
			}
			for i, c := range columns {
				b[i] = math.Min(b[i], c.get(m))
			}
		}
		best[cl] = b
	}
	for _, r := range results {
		if r.Error != "" {
			row := []string{r.Policy, "failed: " + r.Error}
			for range len(head) - 2 {
				row = append(row, "")
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
			continue
		}
		for _, cl := range classes {
			m := metric(r, cl)
			name := map[string]string{"": "all", "guaranteed": "guar.", "best-effort": "BE"}[cl]
			row := []string{r.Policy, name}
			if cl != "" {
				row[0] = ""
			}
			for i, c := range columns {
				v := c.get(m)
				ratio := "-"
				if b := best[cl][i]; b > 0 && !math.IsInf(b, 1) {
					ratio = fmt.Sprintf("%.2f×", v/b)
				} else if v == 0 {
					ratio = "1.00×"
				}
				row = append(row, fmt.Sprintf("%.2f (%s)", v/3600, ratio))
			}
			util := ""
			if cl == "" {
				util = fmt.Sprintf("%.0f%%", 100*r.GPUUtil)
			}
			row = append(row, fmt.Sprint(m.Restarts), fmt.Sprintf("%.2f", m.SLAViolation/3600), util, "")
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
	}
	return tw.Flush()
}
