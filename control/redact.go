package control

// Who sees a job's secrets. A job's env is where API keys go: only the
// job's owner, its tenant's admins and the cluster's admins see its values
// (GET /v1/jobs/{id}) and its logs (GET /v1/jobs/{id}/logs). Every list
// (GET /v1/jobs, /v1/queue, /v1/running, /v1/history) carries env keys
// only, for everyone: a list is encoded once for all its readers
// (readcache.go), and nobody needs another job's secrets to read a queue.
//
// The lines of a job's log (or its converter's output) that a failure's
// reason, a hang event or a suspect server's reason quote are its logs
// too: they always end the text that quotes them, after a mark
// ("; last lines: ", "; last log lines: "), so that hideLogLines cuts
// them off. Lists, nodes and the events of others' jobs carry the mark
// followed by HiddenValue.

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
)

// HiddenValue stands for an env value the caller may not see.
const HiddenValue = "(hidden)"

// redactSpec is spec (a jobspec.Spec's JSON) with every env value replaced
// by HiddenValue; the keys stay. A spec without env values is returned as
// it is (same bytes), and so is one that is not a JSON object.
func redactSpec(spec json.RawMessage) json.RawMessage {
	if len(spec) == 0 {
		return spec
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(spec, &m) != nil {
		return spec
	}
	raw, ok := m["env"]
	if !ok {
		return spec
	}
	var env map[string]string
	if json.Unmarshal(raw, &env) != nil || len(env) == 0 {
		return spec
	}
	for k := range env {
		env[k] = HiddenValue
	}
	b, err := json.Marshal(env)
	if err != nil {
		return spec
	}
	m["env"] = b
	out, err := json.Marshal(m)
	if err != nil {
		return spec
	}
	return out
}

// logMarks start the log lines a text quotes (logLines joins them).
var logMarks = []string{"; last lines: ", "; last log lines: "}

// logLines is the mark and lines quoted at the end of a text: ";
// last lines: l1 ⏎ l2 …" ("" without lines).
func logLines(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return logMarks[0] + strings.Join(lines, " ⏎ ")
}

// quoteLines is out's last n non-empty lines (each cut to 200 bytes)
// after a log mark, on one line: a job's output quoted at the end of an
// error or a reason ("" when out has none).
//
// When a worker fails, torchrun ends the log with its own report (its
// traceback, then a block of time, host, rank, exit code and "error_file:
// <N/A>"): the last lines were that report, never what the worker said.
// From torchrun's line that a worker failed on, the report is left out:
// the quote is the lines before it and that line, as "torchrun: failed
// (exitcode: 1) local_rank: 0 (pid: 123)" (TestQuoteLinesSkipsTorchrunsReport).
func quoteLines(out string, n int) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if i := torchrunFailed(l); i >= 0 {
				l = "torchrun: " + l[i:]
				if j := strings.Index(l, " of binary:"); j >= 0 {
					l = l[:j]
				}
				lines = append(lines, l)
				break
			}
			if len(l) > 200 {
				l = l[:200] + "…"
			}
			lines = append(lines, l)
		}
	}
	return logLines(lines[max(0, len(lines)-n):])
}

// torchrunFailed is where "failed (exitcode: …" begins in l when l is
// torchrun's line that a worker failed (torch 1.13: "ERROR:torch.distributed
// .elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 …";
// 2.x: "E1127 12:00:00.1 42 torch/distributed/elastic/multiprocessing/
// api.py:869] failed (exitcode: 1) local_rank: 0 …"), else -1.
func torchrunFailed(l string) int {
	i := strings.Index(l, "failed (exitcode: ")
	if i < 0 || !strings.Contains(l[:i], "elastic") || !strings.Contains(l[i:], "local_rank: ") {
		return -1
	}
	return i
}

// splitLogLines splits s before the first log mark: text, and the mark
// with the log lines that end s ("" when s quotes none).
func splitLogLines(s string) (text, lines string) {
	i := -1
	for _, m := range logMarks {
		if j := strings.Index(s, m); j >= 0 && (i < 0 || j < i) {
			i = j
		}
	}
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

// hideLogLines is s with the log lines it quotes replaced by HiddenValue
// (the mark stays, to say there were some).
func hideLogLines(s string) string {
	text, lines := splitLogLines(s)
	if lines == "" {
		return s
	}
	return text + lines[:strings.Index(lines, ": ")+2] + HiddenValue
}

// hideRecordLogs hides the log lines j's reason quotes.
func hideRecordLogs(j *JobRecord) { j.Reason = hideLogLines(j.Reason) }

// hideEventLogs hides the log lines e's message and data quote.
func hideEventLogs(e *Event) {
	e.Msg = hideLogLines(e.Msg)
	if len(e.Data) == 0 || !strings.Contains(string(e.Data), `"last_lines"`) {
		return
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(e.Data, &m) != nil {
		return
	}
	if _, ok := m["last_lines"]; !ok {
		return
	}
	m["last_lines"] = json.RawMessage(`["` + HiddenValue + `"]`)
	if b, err := json.Marshal(m); err == nil {
		e.Data = b
	}
}

// quotesLogs says whether e quotes log lines.
func quotesLogs(e *Event) bool {
	_, lines := splitLogLines(e.Msg)
	return lines != "" || strings.Contains(string(e.Data), `"last_lines"`)
}

// eventsFor is evs as the caller (ctx) may see them: the log lines an
// event quotes are hidden unless the caller may read its job's logs (an
// event of no job quotes none anyone may read). evs is not changed.
func eventsFor(ctx context.Context, acc *Access, st storeReads, evs []Event) []Event {
	out, copied := evs, false
	allowed := map[string]bool{}
	for i := range evs {
		if !quotesLogs(&evs[i]) {
			continue
		}
		id := evs[i].JobID
		ok, seen := allowed[id]
		if !seen {
			if id != "" {
				j, err := st.GetJob(ctx, id)
				ok = err == nil && jobRuleIn(ctx, acc, st, "read the logs of", j) == nil
			}
			allowed[id] = ok
		}
		if ok {
			continue
		}
		if !copied {
			out, copied = slices.Clone(evs), true
		}
		hideEventLogs(&out[i])
	}
	return out
}

// redactor keeps each job's redacted spec, so that a spec is redacted once,
// not at every read.
type redactor struct {
	mu sync.Mutex
	m  map[string]redacted
}

type redacted struct{ src, pub json.RawMessage }

// maxRedacted bounds the kept specs; past it the cache starts over.
const maxRedacted = 1 << 16

// spec is job id's spec with env values hidden.
func (r *redactor) spec(id string, spec json.RawMessage) json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.m[id]; ok && sameBytes(e.src, spec) {
		return e.pub
	}
	if r.m == nil || len(r.m) >= maxRedacted {
		r.m = map[string]redacted{}
	}
	pub := redactSpec(spec)
	r.m[id] = redacted{src: spec, pub: pub}
	return pub
}

// records hides env values and quoted log lines in each record (a copy:
// recs is not changed).
func (r *redactor) records(recs []JobRecord) []JobRecord {
	out := make([]JobRecord, len(recs))
	for i, j := range recs {
		j.Spec = r.spec(j.ID, j.Spec)
		hideRecordLogs(&j)
		out[i] = j
	}
	return out
}
