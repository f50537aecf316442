package control

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

// ModelType names a model type: the jobs that share one fitted
// performance model. It is the one key of a model's whole lifecycle: the
// store's rows (String), recovery, the daemon's online models, the
// policy's snapshot models and the refits all use it.
type ModelType struct {
	// Name is the architecture's name (a catalogue model or the job's
	// own architecture block).
	Name string
	// GlobalBatch is the jobs' global batch (a model's forward profile
	// and memory depend on it).
	GlobalBatch int
	// Framework is the launcher; it decides the plans the model ranks
	// (perf.MegatronSpace for Megatron). Empty is DeepSpeed.
	Framework jobspec.Framework
}

// modelTypeOf is the model type of a job spec.
func modelTypeOf(s *jobspec.Spec) ModelType {
	return newModelType(s.Arch, s.Framework)
}

// newModelType is the model type of architecture a (its GlobalBatch the
// jobs') run by framework fw.
func newModelType(a perf.Arch, fw jobspec.Framework) ModelType {
	if fw == "" {
		fw = jobspec.DeepSpeed
	}
	return ModelType{Name: a.Name, GlobalBatch: a.GlobalBatch, Framework: fw}
}

// snapModelType is the type of a model the daemon made for its type
// (Daemon.model, snapModel): its architecture's name and global batch, and
// the framework its plan space is (perf.MegatronSpace: Megatron).
func snapModelType(m *perf.Model) ModelType {
	fw := jobspec.DeepSpeed
	if m.Space.ZeRO01 && m.Space.EvenServers { // perf.MegatronSpace, maybe narrowed by a spec's supports
		fw = jobspec.Megatron
	}
	return newModelType(m.Arch, fw)
}

// snapKey keys the daemon's snapshot models: a model type and the plan
// space of the jobs it is given to (the framework's, narrowed by a spec's
// supports), so jobs whose entrypoints run different plans share the
// type's fitted parameters but not its plans.
type snapKey struct {
	Type  ModelType
	Space perf.Space
}

// dropSnapModels forgets the snapshot models of type t, whatever their
// plan space (a refit or an import made them stale). The caller holds mu.
func (d *Daemon) dropSnapModels(t ModelType) {
	for k := range d.snapModels {
		if k.Type == t {
			delete(d.snapModels, k)
		}
	}
}

// snapKeyOf is the key of a snapshot model.
func snapKeyOf(m *perf.Model) snapKey { return snapKey{snapModelType(m), m.Space} }

// jobSpace is the plans job spec s can run: its framework's, narrowed by
// what its entrypoint supports.
func jobSpace(s *jobspec.Spec) perf.Space {
	return frameworkSpace(s.Framework).Narrow(s.Supports.Space())
}

// String is the store's key: "name/global_batch/framework".
func (t ModelType) String() string {
	return fmt.Sprintf("%s/%d/%s", t.Name, t.GlobalBatch, t.Framework)
}

// Space is the plans the type's framework runs (launch refuses others).
func (t ModelType) Space() perf.Space { return frameworkSpace(t.Framework) }

// ParseModelType reads a ModelType's String. A key without batch and
// framework (stored before model types had them: the name alone) is an
// error naming the key.
func ParseModelType(s string) (ModelType, error) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return ModelType{}, fmt.Errorf("model type %q: want name/global_batch/framework", s)
	}
	rest, fw := s[:i], jobspec.Framework(s[i+1:])
	j := strings.LastIndexByte(rest, '/')
	if j < 0 {
		return ModelType{}, fmt.Errorf("model type %q: want name/global_batch/framework", s)
	}
	name, batch := rest[:j], rest[j+1:]
	n, err := strconv.Atoi(batch)
	if err != nil || n <= 0 || name == "" {
		return ModelType{}, fmt.Errorf("model type %q: want name/global_batch/framework with a positive global batch", s)
	}
	if fw != jobspec.DeepSpeed && fw != jobspec.Megatron {
		return ModelType{}, fmt.Errorf("model type %q: framework %q: want deepspeed or megatron", s, fw)
	}
	return ModelType{Name: name, GlobalBatch: n, Framework: fw}, nil
}

// recoverModels installs the stored models (Store.Models). A row stored
// under the model name alone (before model types carried the global batch
// and the framework) carries its global batch in its architecture: it
// seeds that type for both frameworks, unless a row of the type itself
// was stored. A row that does not decode is skipped with a warning.
func (d *Daemon) recoverModels(stored map[string]json.RawMessage) {
	var legacy []*perf.Online
	for key, raw := range stored {
		var o perf.Online
		if err := json.Unmarshal(raw, &o); err != nil {
			d.log.Warn("recover model: skipped", "type", key, "err", err)
			continue
		}
		t, err := ParseModelType(key)
		if err != nil {
			if !strings.Contains(key, "/") && o.Model.Arch.Name == key && o.Model.Arch.GlobalBatch > 0 {
				legacy = append(legacy, &o)
				continue
			}
			d.log.Warn("recover model: skipped", "type", key, "err", err)
			continue
		}
		o.Model.Space = t.Space()
		d.models[t] = &o
	}
	for _, o := range legacy {
		for _, fw := range []jobspec.Framework{jobspec.DeepSpeed, jobspec.Megatron} {
			t := newModelType(o.Model.Arch, fw)
			if _, ok := d.models[t]; ok {
				continue
			}
			c := *o
			c.Samples = slices.Clone(o.Samples)
			c.Model.Space = t.Space()
			d.models[t] = &c
		}
	}
}
