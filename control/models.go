package control

// The model types the daemon knows (`replan models`), importing measured
// runs into them (`replan models import`), and profiling on demand
// (`replan profile`): the API side.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

// ModelInfo is a model type as `replan models` shows it. The names type,
// samples, params, fitted_at and err_pct are a contract (checks outside
// the project read them).
type ModelInfo struct {
	Type    string             `json:"type"`
	Samples int                `json:"samples"`
	Params  map[string]float64 `json:"params"`
	// FittedAt is when its parameters were last fitted (null: never, the
	// unfitted defaults).
	FittedAt *time.Time `json:"fitted_at"`
	// ErrPct is the mean error of its predictions on its own samples, in
	// percent (0 without samples).
	ErrPct     float64        `json:"err_pct"`
	ProfiledAt *time.Time     `json:"profiled_at,omitempty"`
	Trusted    bool           `json:"trusted"`
	Refits     int            `json:"refits"`
	Arch       perf.Arch      `json:"arch"`
	Profiling  *ProfileStatus `json:"profiling,omitempty"`
	// Data are the samples themselves (GET /v1/models?samples=1: what
	// `replan models export` writes).
	Data []perf.Sample `json:"data,omitempty"`

	// ActScale is the activation factor fitted from the measured peak
	// memory of PeakSamples samples (absent: none measured; mempeak.go).
	ActScale    float64 `json:"act_scale,omitempty"`
	PeakSamples int     `json:"peak_samples,omitempty"`
}

// Models lists every model type the daemon holds, by type; withSamples
// adds the samples.
func (d *Daemon) Models(withSamples bool) []ModelInfo {
	profs := map[string]ProfileStatus{}
	for _, p := range d.Profiles() {
		profs[p.Type] = p
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]ModelInfo, 0, len(d.models))
	for t, o := range d.models {
		mi := ModelInfo{Type: t.String(), Samples: len(o.Samples), Params: map[string]float64{}, ErrPct: ModelErrPct(o.Model, o.Samples),
			Trusted: o.Trusted(), Refits: o.Refits, Arch: o.Model.Arch}
		v := o.Model.Params.Vector()
		for i, n := range perf.ParamNames {
			mi.Params[n] = v[i]
		}
		if !o.FittedAt.IsZero() {
			at := o.FittedAt
			mi.FittedAt = &at
		}
		if !o.ProfiledAt.IsZero() {
			at := o.ProfiledAt
			mi.ProfiledAt = &at
		}
		mi.ActScale = o.Model.Arch.ActScale
		for _, s := range o.Samples {
			if s.PeakGPUGB > 0 {
				mi.PeakSamples++
			}
		}
		if p, ok := profs[mi.Type]; ok {
			mi.Profiling = &p
		}
		if withSamples {
			mi.Data = slices.Clone(o.Samples)
		}
		out = append(out, mi)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Type < out[b].Type })
	return out
}

// ImportRequest is POST /v1/models/import: measured runs of a model type
// (its architecture with the jobs' global batch).
type ImportRequest struct {
	Type    string        `json:"type"`
	Arch    perf.Arch     `json:"arch"`
	Samples []perf.Sample `json:"samples"`
	// Source names where they come from (events).
	Source string `json:"source,omitempty"`
}

// ImportModel adds measured runs to a model type and fits it: an unfitted
// type gets its forward profile from the runs that carry a forward time,
// then its parameters from all its samples. The type counts as profiled
// (no profiling on arrival). Stored before memory changes.
func (d *Daemon) ImportModel(ctx context.Context, req ImportRequest) (ModelInfo, error) {
	t, err := ParseModelType(req.Type)
	if err != nil {
		return ModelInfo{}, err
	}
	if req.Arch.Name != t.Name || req.Arch.GlobalBatch != t.GlobalBatch {
		return ModelInfo{}, fmt.Errorf("import %s: architecture %s with global batch %d does not match the type", t, req.Arch.Name, req.Arch.GlobalBatch)
	}
	if err := req.Arch.Validate(); err != nil {
		return ModelInfo{}, fmt.Errorf("import %s: arch: %w", t, err)
	}
	if len(req.Samples) == 0 {
		return ModelInfo{}, fmt.Errorf("import %s: no samples", t)
	}
	for i, s := range req.Samples {
		if s.IterS <= 0 || s.Plan.GPUs() != s.Resources.Placement.GPUs() || s.Plan.GPUs() < 1 {
			return ModelInfo{}, fmt.Errorf("import %s: samples[%d]: plan %s on placement %s, %g s: want a plan on as many GPUs as its placement and a positive time", t, i, s.Plan.Spec(), s.Resources.Placement, s.IterS)
		}
	}
	d.mu.Lock()
	o, ok := d.models[t]
	if !ok {
		o = &perf.Online{Model: d.cfg.Model(req.Arch)}
		o.Model.Arch = req.Arch
		o.Model.Arch.ActScale = 0 // only measured peaks set it (refitActScale below)
		o.Model.Space = t.Space()
	}
	c := *o
	n0 := len(o.Samples)
	c.Samples = append(slices.Clone(o.Samples), req.Samples...)
	if n := len(c.Samples); n > 256 {
		c.Samples = c.Samples[n-256:]
	}
	d.mu.Unlock()
	// Fitting takes a while: without the lock (a concurrent change of the
	// type's model is kept by the check below).
	if c.FittedAt.IsZero() && c.Model.Params == perf.DefaultParams {
		if f, err := perf.FitForward(req.Arch, req.Samples); err == nil {
			c.Model.Forward = f
		}
	}
	k, st, err := perf.Fit(c.Model, c.Samples, perf.FitOptions{BoundOverlap: true})
	if err != nil {
		return ModelInfo{}, fmt.Errorf("import %s: fit: %w", t, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur, ok2 := d.models[t]; ok2 != ok || (ok && (cur != o || len(cur.Samples) != n0)) {
		return ModelInfo{}, fmt.Errorf("import %s: %w (the model changed during the fit; import again)", t, ErrConflict)
	}
	at := d.now()
	c.Model.Params, c.Stats, c.FittedAt = k, st, at
	refitActScale(t, &c) // samples that carry a measured peak (mempeak.go)
	if c.ProfiledAt.IsZero() {
		c.ProfiledAt = at
	}
	raw, err := json.Marshal(&c)
	if err != nil {
		return ModelInfo{}, fmt.Errorf("import %s: %w", t, err)
	}
	src := req.Source
	if src == "" {
		src = "an import"
	}
	msg := fmt.Sprintf("model %s: %d samples imported from %s; fitted on %d, %.1f%% mean error on them", t, len(req.Samples), src, len(c.Samples), ModelErrPct(c.Model, c.Samples))
	if err := d.write(ctx, nil, Batch{Models: []ModelWrite{{Type: t.String(), Data: raw, At: at}}, Events: []Event{d.ev("import", "", "", msg, nil)}}, func() {
		if ok {
			*o = c
		} else {
			d.models[t] = &c
		}
		d.modelSaved[t] = at
		d.dropSnapModels(t)
	}); err != nil {
		return ModelInfo{}, fmt.Errorf("import %s: %w", t, err)
	}
	d.publish()
	return ModelInfo{Type: t.String(), Samples: len(c.Samples), ErrPct: ModelErrPct(c.Model, c.Samples), FittedAt: &at}, nil
}

// ProfileResponse is POST /v1/profile's answer.
type ProfileResponse struct {
	Type string `json:"type"`
}

func (a *API) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.D.Models(r.URL.Query().Get("samples") == "1"))
}

func (a *API) importModel(w http.ResponseWriter, r *http.Request) {
	if err := a.Access.canAdmin(callerOf(r.Context()), "import models"); err != nil {
		writeErr(w, http.StatusForbidden, err)
		return
	}
	var req ImportRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("request body: want {\"type\", \"arch\", \"samples\"}: %v", err))
		return
	}
	mi, err := a.D.ImportModel(r.Context(), req)
	if err != nil {
		code := http.StatusBadRequest
		if errors.Is(err, ErrStore) {
			code = http.StatusServiceUnavailable
		} else if errors.Is(err, ErrConflict) {
			code = http.StatusConflict
		}
		writeErr(w, code, err)
		return
	}
	writeJSON(w, http.StatusOK, mi)
}

func (a *API) profile(w http.ResponseWriter, r *http.Request) {
	var req SubmitRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, MaxSpecBytes+4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("request body: want {\"file\": ..., \"spec\": ...}: %v", err))
		return
	}
	if req.File == "" {
		req.File = "job.yaml"
	}
	spec, err := jobspec.Parse(req.File, []byte(req.Spec), perf.NewCatalog())
	if err != nil {
		writeBadSpec(w, err)
		return
	}
	if err := a.Access.canSubmit(callerOf(r.Context()), spec.Tenant); err != nil {
		writeErr(w, http.StatusForbidden, err)
		return
	}
	t, err := a.D.Profile(r.Context(), spec)
	if err != nil {
		code := http.StatusConflict
		if errors.Is(err, ErrStore) {
			code = http.StatusServiceUnavailable
		}
		writeErr(w, code, err)
		return
	}
	writeJSON(w, http.StatusAccepted, ProfileResponse{Type: t.String()})
}

// Models is GET /v1/models (withSamples: ?samples=1).
func (c *Client) Models(ctx context.Context, withSamples bool) ([]ModelInfo, error) {
	var out []ModelInfo
	path := "/v1/models"
	if withSamples {
		path += "?samples=1"
	}
	return out, c.do(ctx, "GET", path, nil, &out)
}

// ImportModel is POST /v1/models/import.
func (c *Client) ImportModel(ctx context.Context, req ImportRequest) (ModelInfo, error) {
	var out ModelInfo
	return out, c.do(ctx, "POST", "/v1/models/import", req, &out)
}

// Profile is POST /v1/profile: profile spec's model type now.
func (c *Client) Profile(ctx context.Context, file string, spec []byte) (ProfileResponse, error) {
	var out ProfileResponse
	return out, c.do(ctx, "POST", "/v1/profile", SubmitRequest{File: file, Spec: string(spec)}, &out)
}
