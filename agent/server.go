package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/replan/replan/agent/logparse"
)

// Sample is one throughput sample parsed from a process's log.
type Sample = logparse.Sample

// API limits and defaults.
const (
	maxBodyBytes    = 1 << 20
	defaultTail     = 100
	maxTail         = 100000
	defaultGrace    = 30 * time.Second
	followPollEvery = 250 * time.Millisecond
)

// ErrorBody is the JSON body of every API error.
type ErrorBody struct {
	Error string `json:"error"`
	// Field names the request field at fault, when there is one.
	Field string `json:"field,omitempty"`
}

// ProcessList is the body of GET /v1/processes.
type ProcessList struct {
	Processes []ProcessInfo `json:"processes"`
}

// StopRequest is the optional body of POST /v1/processes/{id}/stop.
type StopRequest struct {
	// GraceSeconds between SIGTERM and SIGKILL (default 30).
	GraceSeconds *float64 `json:"grace_seconds,omitempty"`
}

// SampleList is the body of GET /v1/processes/{id}/samples.
type SampleList struct {
	ID      string   `json:"id"`
	Samples []Sample `json:"samples"`
}

// Handler returns the agent's HTTP API.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Status())
	})
	mux.HandleFunc("GET /v1/gpus", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.sampler.Snapshot())
	})
	mux.HandleFunc("GET /v1/processes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, ProcessList{Processes: a.sup.List()})
	})
	mux.HandleFunc("POST /v1/processes", a.handleStart)
	mux.HandleFunc("GET /v1/processes/{id}", func(w http.ResponseWriter, r *http.Request) {
		info, err := a.sup.Get(r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, info)
	})
	mux.HandleFunc("DELETE /v1/processes/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := a.sup.Delete(r.Context(), r.PathValue("id")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/processes/{id}/stop", a.handleStop)
	mux.HandleFunc("GET /v1/processes/{id}/logs", a.handleLogs)
	mux.HandleFunc("POST /v1/run", a.handleRun)
	mux.HandleFunc("GET /v1/processes/{id}/samples", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		var since time.Time
		if v := r.URL.Query().Get("since"); v != "" {
			var err error
			if since, err = time.Parse(time.RFC3339Nano, v); err != nil {
				writeError(w, &FieldError{"since", fmt.Sprintf("%q is not an RFC 3339 time", v)})
				return
			}
		}
		s, err := a.sup.Samples(id, since)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, SampleList{ID: id, Samples: s})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, ErrorBody{Error: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)})
	})
	return a.withEpoch(mux) // lease.go
}

func (a *Agent) handleStart(w http.ResponseWriter, r *http.Request) {
	var spec ProcessSpec
	if err := decodeJSON(r, &spec, false); err != nil {
		writeError(w, err)
		return
	}
	info, err := a.sup.Start(r.Context(), spec)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, info)
}

func (a *Agent) handleStop(w http.ResponseWriter, r *http.Request) {
	var req StopRequest
	if err := decodeJSON(r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	grace := defaultGrace
	if req.GraceSeconds != nil {
		g := *req.GraceSeconds
		if g < 0 || g > 24*3600 || g != g {
			writeError(w, &FieldError{"grace_seconds", "must be between 0 and 86400"})
			return
		}
		grace = time.Duration(g * float64(time.Second))
	}
	info, err := a.sup.Stop(r.Context(), r.PathValue("id"), grace)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// handleLogs serves the last ?tail=N lines (default 100, "all" for the
// whole current file) and with ?follow=1 keeps streaming new output until
// the client goes away or the process has exited and its log is drained.
func (a *Agent) handleLogs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	path, err := a.sup.LogPath(id)
	if err != nil {
		writeError(w, err)
		return
	}
	done, _ := a.sup.Done(id)
	q := r.URL.Query()
	follow := false
	if v := q.Get("follow"); v != "" {
		follow, err = strconv.ParseBool(v)
		if err != nil {
			writeError(w, &FieldError{"follow", fmt.Sprintf("%q is not a boolean", v)})
			return
		}
	}
	st, _ := os.Stat(path)
	var start int64
	if st != nil {
		start = st.Size()
	}
	var body []byte
	switch v := q.Get("tail"); v {
	case "all":
		body, err = readUpTo(path, start)
	default:
		n := defaultTail
		if v != "" {
			n, err = strconv.Atoi(v)
			if err != nil || n < 0 || n > maxTail {
				writeError(w, &FieldError{"tail", fmt.Sprintf("%q must be 0..%d or \"all\"", v, maxTail)})
				return
			}
		}
		body, err = tailLines(path, n)
	}
	if err != nil {
		writeError(w, fmt.Errorf("read log: %w", err))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
	if !follow {
		return
	}
	rc := http.NewResponseController(w)
	rc.Flush()
	off := start
	t := time.NewTicker(followPollEvery)
	defer t.Stop()
	buf := make([]byte, 64<<10)
	for {
		exited := false
		select {
		case <-done:
			exited = true
		default:
		}
		for {
			n, newOff, err := readAt(path, off, buf)
			off = newOff
			if n > 0 {
				if _, err := w.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil || n < len(buf) {
				break
			}
		}
		if rc.Flush() != nil || exited {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-done:
		case <-t.C:
		}
	}
}

// readAt reads from path at off; a file shorter than off was rotated
// (copy-truncate), so reading restarts at 0.
func readAt(path string, off int64, buf []byte) (int, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, off, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, off, err
	}
	if st.Size() < off {
		off = 0
	}
	n, err := f.ReadAt(buf, off)
	if err == io.EOF {
		err = nil
	}
	return n, off + int64(n), err
}

func readUpTo(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return []byte{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

// decodeJSON decodes the body strictly (unknown fields are errors naming the
// field); an empty body is allowed when emptyOK.
func decodeJSON(r *http.Request, v any, emptyOK bool) error {
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBodyBytes))
	if err != nil {
		return &FieldError{"body", err.Error()}
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		if emptyOK {
			return nil
		}
		return &FieldError{"body", "empty; want a JSON object"}
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			return &FieldError{te.Field, fmt.Sprintf("want %s, got JSON %s", te.Type, te.Value)}
		case errors.As(err, &se):
			return &FieldError{"body", fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, err)}
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return &FieldError{f, "unknown field"}
		}
		return &FieldError{"body", err.Error()}
	}
	if dec.More() {
		return &FieldError{"body", "trailing data after the JSON object"}
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	var fe *FieldError
	switch {
	case errors.As(err, &fe):
		writeJSON(w, http.StatusBadRequest, ErrorBody{Error: fe.Error(), Field: fe.Field})
	case errors.Is(err, ErrNotFound):
		writeJSON(w, http.StatusNotFound, ErrorBody{Error: err.Error()})
	case errors.Is(err, ErrConflict):
		writeJSON(w, http.StatusConflict, ErrorBody{Error: err.Error()})
	default:
		writeJSON(w, http.StatusInternalServerError, ErrorBody{Error: err.Error()})
	}
}
