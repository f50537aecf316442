package control

// Who sees a job's secrets. A job's env is where API keys go: only the
// job's owner, its tenant's admins and the cluster's admins see its values
// (GET /v1/jobs/{id}) and its logs (GET /v1/jobs/{id}/logs). Every list
// (GET /v1/jobs, /v1/queue, /v1/running, /v1/history) carries env keys
// only, for everyone: a list is encoded once for all its readers
// (readcache.go), and nobody needs another job's secrets to read a queue.

import (
	"encoding/json"
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

// records hides env values in each record (a copy: recs is not changed).
func (r *redactor) records(recs []JobRecord) []JobRecord {
	out := make([]JobRecord, len(recs))
	for i, j := range recs {
		j.Spec = r.spec(j.ID, j.Spec)
		out[i] = j
	}
	return out
}
