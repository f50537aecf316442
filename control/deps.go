package control

// Dependencies (spec after: [{job: ID, when: ok|any|failed}]): a job is
// not offered to the scheduler until every job it names has ended as its
// condition says; it waits with the reason "waits for j-000012 to finish
// ok". A condition that can no longer be met (the job ended the other
// way, or does not exist) makes it unschedulable, with a reason naming
// the dependency; a final state never changes, so it stays so until it is
// cancelled. At submit, an unknown job or a condition already broken is
// refused (admitAfter). See docs/control.md, "Dependencies".

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/replan/replan/jobspec"
)

// depState is what the daemon knows of a job's dependencies.
type depState struct {
	met     bool                // every condition is met: the job may be scheduled
	waitFor string              // why it waits ("waits for j-000012 to finish ok")
	broken  string              // a condition that can no longer be met
	ended   map[string]JobState // final states of dependencies seen ended
}

// depsMet reports whether js may be offered to the scheduler as far as
// its dependencies go: they are met, or it has started before (they were
// met then, and a final state does not change; a recovered daemon need
// not look again).
func (js *jobState) depsMet() bool {
	return len(js.spec.After) == 0 || js.deps.met || !js.rec.StartedAt.IsZero()
}

// depMeets reports whether a dependency that ended in state st meets
// condition w (final states only).
func depMeets(w jobspec.When, st JobState) bool {
	switch w {
	case jobspec.WhenAny:
		return true
	case jobspec.WhenFailed:
		return st == StateFailed || st == StateCancelled
	}
	return st == StateFinished
}

// depBrokenWhy is the reason of a job whose dependency dep ended in st,
// which does not meet its condition.
func depBrokenWhy(dep jobspec.Dep, st JobState) string {
	return fmt.Sprintf("its dependency %s ended %s: it waited for %s", dep.Job, st, dep)
}

// depFinal is the final state of job id as far as the daemon knows: ""
// while it has not ended; ErrNotFound when there is no such job. The
// caller holds d.mu (the store is read under it, as checkSchedulable
// writes under it).
func (d *Daemon) depFinal(ctx context.Context, id string) (JobState, error) {
	if _, ok := d.jobs[id]; ok {
		return "", nil
	}
	r, err := d.cfg.Store.GetJob(ctx, id)
	if err != nil {
		return "", err
	}
	if !r.State.Final() {
		return "", nil
	}
	return r.State, nil
}

// checkDeps runs at the start of every round (the caller holds d.mu): it
// learns which dependencies ended, marks the jobs whose conditions are all
// met (they are offered to the scheduler from this round on) and those
// with a broken one (checkSchedulable makes them unschedulable). It
// returns the reason of every queued or preempted job that still waits for
// a dependency.
func (d *Daemon) checkDeps(ctx context.Context) (map[string]string, error) {
	waits := map[string]string{}
	var errs []error
	ids := make([]string, 0)
	for id, js := range d.jobs {
		if !js.depsMet() && js.deps.broken == "" {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		js := d.jobs[id]
		if js.deps.ended == nil {
			js.deps.ended = map[string]JobState{}
		}
		var unmet []string
		for _, dep := range js.spec.After {
			st, ok := js.deps.ended[dep.Job]
			if !ok {
				var err error
				st, err = d.depFinal(ctx, dep.Job)
				switch {
				case errors.Is(err, ErrNotFound):
					js.deps.broken = fmt.Sprintf("its dependency %s does not exist", dep.Job)
				case err != nil:
					errs = append(errs, fmt.Errorf("job %s: dependency %s: %w", id, dep.Job, err))
					unmet = append(unmet, dep.String())
					continue
				case st != "":
					js.deps.ended[dep.Job] = st
				}
			}
			if js.deps.broken != "" {
				break
			}
			switch {
			case st == "":
				unmet = append(unmet, dep.String())
			case !depMeets(dep.When, st):
				js.deps.broken = depBrokenWhy(dep, st)
			}
			if js.deps.broken != "" {
				break
			}
		}
		switch {
		case js.deps.broken != "":
			js.deps.waitFor = ""
		case len(unmet) == 0:
			js.deps.met, js.deps.waitFor = true, ""
		default:
			js.deps.waitFor = "waits for " + strings.Join(unmet, " and ")
			if js.rec.State == StateQueued || js.rec.State == StatePreempted {
				waits[id] = js.deps.waitFor
			}
		}
	}
	return waits, errors.Join(errs...)
}

// admitAfter refuses, at submit, a dependency on a job that does not exist
// or has already ended in a way that can never meet the condition.
func (d *Daemon) admitAfter(ctx context.Context, spec *jobspec.Spec, add func(field, format string, args ...any)) error {
	for i, dep := range spec.After {
		field := fmt.Sprintf("after[%d].job", i)
		d.mu.Lock()
		st, err := d.depFinal(ctx, dep.Job)
		d.mu.Unlock()
		switch {
		case errors.Is(err, ErrNotFound):
			add(field, "no job %s (submit the jobs it waits for first)", dep.Job)
		case err != nil:
			return fmt.Errorf("admit: dependency %s: %w", dep.Job, storeErr(err))
		case st != "" && !depMeets(dep.When, st):
			add(field, "job %s already ended %s: it can never %s", dep.Job, st, strings.TrimPrefix(dep.String(), dep.Job+" to "))
		}
	}
	return nil
}
