// Package sim replays a job trace against the scheduling policies of
// package sched, event by event, and measures what each policy does to job
// completion times, queueing, restarts and service guarantees.
//
// The rules (docs/scheduling.md has the long form):
//   - jobs arrive at their submission time; a round of the policy runs on
//     every arrival and completion (optionally at most once per
//     Config.RoundInterval);
//   - a running job advances at the measured iteration time of its (plan,
//     placement) when its model's placements table has that row, else at
//     the fitted model's prediction; the global batch is fixed, so progress
//     is counted in iterations and a job finishes after its steps;
//   - every start and every change of plan or placement costs a
//     checkpoint-restart (Config.RestartCost) during which the job holds its
//     GPUs and makes no progress; a preempted job holds nothing and makes no
//     progress until it starts again from its checkpoint;
//   - the simulator is deterministic: the same trace, data and policy give
//     the same result.
//
// The simulator uses the very same sched code a live control plane does:
// it builds a sched.Snapshot, calls Policy.Schedule and applies the
// decisions, checking that no server is ever over-committed.
package sim
