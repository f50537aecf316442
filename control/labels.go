package control

// Label constraints (node features): a spec's constraint.labels lists the
// labels every server of the job must carry (the inventory's labels,
// ServerInfo.Labels). The scheduler gets them in the snapshot (pinJob)
// and offers only such servers (sched/labels.go); admission refuses a
// constraint no server of the inventory can satisfy (admitLabels), a job
// whose labelled servers are all out of service is unschedulable
// (labelCapacity in unschedulableWhy), and breaksLabels stays as a last
// check of each decision, which a policy that honours labels never trips.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/replan/replan/internal/labels"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/sched"
)

// labelled is the words for the servers a job's labels allow.
func labelled(req []string) string { return "servers labelled " + strings.Join(req, ", ") }

// labelMatch reports, by server index, whether a server carries req.
func (d *Daemon) labelMatch(req []string) func(i int) bool {
	return func(i int) bool { return labels.Match(d.cfg.Servers[i].Labels, req) }
}

// admitLabels adds the admission problems of spec's constraint: no server
// of the inventory carries its labels, the request is more GPUs than the
// servers that do have, or its pinned tiers cannot hold it there.
func (d *Daemon) admitLabels(spec *jobspec.Spec, minG int, add func(field, format string, args ...any)) {
	req := spec.RequiredLabels()
	if len(req) == 0 {
		return
	}
	match := d.labelMatch(req)
	n := 0
	for i := range d.cfg.Servers {
		if match(i) {
			n++
		}
	}
	c := capacityOf(d.cfg.Servers, match)
	switch {
	case n == 0:
		add("constraint.labels", "no server of the inventory carries %s (the servers' labels: %s)", strings.Join(req, ", "), d.knownLabels())
	case spec.Request.GPUs > c.gpus:
		add("request.gpus", "%d GPUs asked, the %d %s have %d in all", spec.Request.GPUs, n, labelled(req), c.gpus)
	default:
		if need := pinNeed(spec, minG); need > 0 && len(spec.Pin.Tiers) > 0 {
			if most, where := pinCapacity(spec.Pin.Tiers, c); need > most {
				add("pin.tiers", "pinned to %s: the job needs %d GPUs there, the largest %s of %s has %d", tiersString(spec.Pin.Tiers), need, where, labelled(req), most)
			}
		}
	}
}

// knownLabels lists every label of the inventory's servers, sorted ("none"
// when no server has any).
func (d *Daemon) knownLabels() string {
	var out []string
	for _, s := range d.cfg.Servers {
		for _, l := range strings.Split(labels.Format(s.Labels), ",") {
			if l != "" && !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
	}
	if len(out) == 0 {
		return "none"
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// labelCapacity narrows the capacities unschedulableWhy compares a job
// against (all servers, those in service now) to the servers carrying its
// labels, and names them ("" when it has none). The caller holds d.mu.
func (d *Daemon) labelCapacity(js *jobState, all, now capacity) (capacity, capacity, string) {
	req := js.spec.RequiredLabels()
	if len(req) == 0 {
		return all, now, ""
	}
	match := d.labelMatch(req)
	return capacityOf(d.cfg.Servers, match), capacityOf(d.healthyServers(), func(i int) bool { return match(i) && !d.nodes[i].drained }), " on " + labelled(req)
}

// breaksLabels reports why decision a would put its job on a server
// lacking a required label, or "" when it does not.
func (d *Daemon) breaksLabels(js *jobState, a sched.Decision) string {
	req := js.spec.RequiredLabels()
	if len(req) == 0 || a.Kind == sched.Preempt {
		return ""
	}
	for _, al := range a.Alloc {
		if al.Server < 0 || al.Server >= len(d.cfg.Servers) || al.GPUs == 0 {
			continue
		}
		if miss := labels.Missing(d.cfg.Servers[al.Server].Labels, req); len(miss) > 0 {
			return fmt.Sprintf("constraint labels %s; the scheduler offered server %s, which lacks %s", strings.Join(req, ", "), d.cfg.Servers[al.Server].Name, strings.Join(miss, ", "))
		}
	}
	return ""
}
