package data

import "time"

// LinkRow is one link that jobs share (a rack's uplink to the spine): the
// jobs on it, each one's time-shift within its iteration, and the link's
// compatibility score (1 − excess/total demand with the shifts applied).
type LinkRow struct {
	Name   string
	Score  float64
	Jobs   []string
	Shifts []time.Duration
}

// Links is the time-shift report of the last scheduling round.
type Links struct {
	Shared  int
	Score   float64 // demand-weighted mean compatibility
	Dropped []string
	Links   []LinkRow
}

// LinksMsg carries a polled link report.
type LinksMsg struct {
	Links Links
	At    time.Time
	Err   error
}
