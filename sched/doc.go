// Package sched decides, for one snapshot of a GPU training cluster, which
// jobs run where, on how many GPUs and CPU cores, and with which execution
// plan. It is pure: a Snapshot goes in (servers, tenants, jobs, the time as a
// field), Decisions come out (Start, Reconfigure, Preempt, and the reason
// every other job waits). No I/O, no clock, no goroutines.
//
// The full policy is Morphling's Algorithm 1 (Morphling): guaranteed jobs
// below their minimum demand (minRes) first, then best-effort and running
// jobs by descending slope of their resource sensitivity curve, taking free
// resources on each server before shrinking the lowest-slope job that is
// above its own minRes; shrinking to zero is a preemption. The baselines of
// the Morphling evaluation share the Policy interface so the simulator (sim/)
// compares them on the very same code: Static, PlanOnly (Morphling-E),
// ResourcesOnly (Morphling-R, Sia-like DP scaling), Synergy and AntMan.
//
// Network-aware placement (NewReplan, the "replan" policy) adds Dally's
// delay scheduling over placement tiers (server < rack < cross-rack) with
// timers auto-tuned from a TimerHistory the caller keeps, Dally's Nw_sens
// priority, CASSINI time-shifts for jobs sharing a rack's spine uplink
// (Decision.Shift), and an uplink hold: a waiting job whose offer across
// racks would be slowed by more than NetOptions.UplinkHold on an uplink
// other cross-rack jobs already load leaves the GPUs to the jobs behind it
// for the round, and takes only what they leave (while it has waited
// less than its run times the number of others waiting, at least 2, at
// most NetOptions.UplinkHoldRuns). Decisions.Timers exposes
// every waiting job's timers.
// The network baselines Tiresias, Gandiva and Dally (NewDally) run on exact
// requests; WithShifts adds time-shifts to any policy.
//
// See README.md in this directory for the pipeline and a glossary, and
// docs/scheduling.md for how to read the simulator's table.
package sched
