// Package tui is replan's live terminal UI (Bubble Tea v2): the cluster's
// racks, servers and GPUs, the queue with its delay timers counting down,
// the running jobs with their plans, a job's plan history, sensitivity curve
// and memory estimate, and the event stream.
//
// Layout, one folder per screen with a thin root:
//
//	tui/            Run, the Backend interface, the root model (size, focus,
//	                global keys, tab switching, the connection banner) and
//	                the commands that poll the backend
//	tui/data        the rows the screens read and the typed messages
//	tui/common      styles (per colour profile), keys, palette, helpers
//	tui/cluster     racks → servers → GPU cells
//	tui/queue       waiting jobs, reasons, delay timers
//	tui/jobs        running jobs: plan, placement, progress
//	tui/jobdetail   plan history, sensitivity curve, memory, decisions
//	tui/events      the event stream, filterable
//	tui/controlbackend  the Backend over a control.Client (the daemon's API)
//	tui/tuitest     a fake Backend and fixed snapshots for tests
//
// Data only reaches the program as messages produced by tea.Cmds: the status,
// servers, queue and running jobs are polled every second, events arrive by
// long polling, and Update never blocks. When the backend cannot be reached
// a banner says so and polling retries with exponential backoff.
//
// The TUI reads the control API only: it never imports ssh/ or the store
// (layering_test.go checks the import graph).
package tui
