package control

import "time"

// AttemptsOf is the job's launches as GET /v1/history lists them
// (HistoryEntry.Attempts), derived from its detail (GET /v1/jobs/ID: its
// state history and decisions); now ends the running one's GPU-hours. The
// TUI's job detail lists them for jobs that have not ended too.
func AttemptsOf(jd JobDetail, now time.Time) []Attempt {
	return attemptsOf(jd.Job, jd.History, jd.Decisions, now)
}
