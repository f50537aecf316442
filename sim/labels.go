package sim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/internal/labels"
)

// checkLabels refuses a trace job whose labels no server carries, or whose
// GPUs are more than the servers carrying them have: it could never start
// (the daemon's admission refuses such a spec).
func (s *simulator) checkLabels(w dataset.WorkloadJob) error {
	req := w.LabelList()
	if len(req) == 0 {
		return nil
	}
	n, gpus := 0, 0
	for _, sv := range s.servers {
		if labels.Match(sv.Labels, req) {
			n++
			gpus += sv.GPUs
		}
	}
	switch {
	case n == 0:
		return fmt.Errorf("trace:%d: job %s: labels %s: no server carries them (--server-labels)", w.Line, w.Name, w.Labels)
	case w.GPUs > gpus:
		return fmt.Errorf("trace:%d: job %s asks for %d GPUs, the %d servers labelled %s have %d", w.Line, w.Name, w.GPUs, n, w.Labels, gpus)
	}
	return nil
}

// ParseServerLabels reads a --server-labels value for servers servers:
// comma-separated LABEL:FIRST-LAST (or LABEL:INDEX) items, LABEL a name or
// name=value, the indices 0-based and inclusive, e.g.
// "ib-hdr:0-3,gpu=a800-80g:2-5". It returns the labels of each server.
func ParseServerLabels(spec string, servers int) ([]map[string]string, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	out := make([]map[string]string, servers)
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		label, rng, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("server labels %q: want LABEL:FIRST-LAST", item)
		}
		name, val, _ := strings.Cut(label, "=")
		if err := labels.CheckName(name); err != nil {
			return nil, fmt.Errorf("server labels %q: %v", item, err)
		}
		if err := labels.CheckValue(val); err != nil {
			return nil, fmt.Errorf("server labels %q: %v", item, err)
		}
		lo, hi, isRange := strings.Cut(rng, "-")
		if !isRange {
			hi = lo
		}
		a, errA := strconv.Atoi(lo)
		b, errB := strconv.Atoi(hi)
		if errA != nil || errB != nil || a < 0 || b < a || b >= servers {
			return nil, fmt.Errorf("server labels %q: want server indices FIRST-LAST with 0 <= FIRST <= LAST < %d", item, servers)
		}
		for i := a; i <= b; i++ {
			if out[i] == nil {
				out[i] = map[string]string{}
			}
			out[i][name] = val
		}
	}
	return out, nil
}
