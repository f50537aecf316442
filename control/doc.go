// Package control is replan's control plane: the daemon that owns the
// cluster's state and runs the loop
//
//	submit → snapshot → sched policy → decisions → executor → observe → refit
//
// Its parts: the Store (SQLite today, behind an interface), the loop,
// executors (the real one over ssh/ and the agent, a simulated one for
// tests and `replan demo`), and the API (HTTP/JSON on a unix socket).
// Scheduling policy lives in sched/, never here.
package control
