package launch

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/replan/replan/perf"
)

// archFlag is one Megatron architecture flag and the model field it comes
// from.
type archFlag struct {
	flag  string
	field string // the job spec's model field
	value func(perf.Arch) int
	// atLeast: the args may give a larger value (the position-embedding
	// table may be longer than the sequence).
	atLeast bool
}

var archFlags = []archFlag{
	{"--num-layers", "layers", func(a perf.Arch) int { return a.Layers }, false},
	{"--hidden-size", "hidden", func(a perf.Arch) int { return a.Hidden }, false},
	{"--num-attention-heads", "heads", func(a perf.Arch) int { return a.Heads }, false},
	{"--seq-length", "seq_len", func(a perf.Arch) int { return a.SeqLen }, false},
	{"--max-position-embeddings", "seq_len", func(a perf.Arch) int { return a.SeqLen }, true},
	{"--vocab-size", "vocab", func(a perf.Arch) int { return a.Vocab }, false},
}

// MegatronOwnedFlags are the flags replan renders from the plan and the
// job spec; a job's args must not give them (the plan, the global batch,
// the length and the checkpoint directory are the spec's to say).
var MegatronOwnedFlags = map[string]string{
	"--tensor-model-parallel-size":   "the plan (request.plan, chosen by replan)",
	"--pipeline-model-parallel-size": "the plan (request.plan, chosen by replan)",
	"--micro-batch-size":             "the plan (request.plan, chosen by replan)",
	"--global-batch-size":            "global_batch",
	"--train-iters":                  "iterations",
	"--save":                         "checkpoint_dir",
	"--load":                         "checkpoint_dir",
}

// argValue finds flag in args as "--flag V" or "--flag=V".
func argValue(args []string, flag string) (string, bool) {
	for i, a := range args {
		if a == flag {
			if i+1 < len(args) {
				return args[i+1], true
			}
			return "", true
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

// CheckMegatronArgs checks a Megatron job's own args against its model
// type: an architecture flag (--num-layers, --hidden-size,
// --num-attention-heads, --seq-length, --max-position-embeddings,
// --vocab-size) that contradicts the model, or a flag replan renders from
// the plan or the spec (MegatronOwnedFlags), is an error naming the flag
// and the spec field. Every problem is reported (errors.Join).
func CheckMegatronArgs(a perf.Arch, args []string) error {
	var errs []error
	for _, f := range archFlags {
		v, ok := argValue(args, f.flag)
		if !ok {
			continue
		}
		want := f.value(a)
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("args: %s %q: want a positive integer", f.flag, v))
			continue
		}
		if want == 0 {
			continue // the model does not say (a vision model's vocabulary)
		}
		switch {
		case f.atLeast && n < want:
			errs = append(errs, fmt.Errorf("args: %s %d is below model %s's %s %d", f.flag, n, a.Name, f.field, want))
		case !f.atLeast && n != want:
			errs = append(errs, fmt.Errorf("args: %s %d contradicts model %s's %s %d", f.flag, n, a.Name, f.field, want))
		}
	}
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if from, ok := MegatronOwnedFlags[name]; ok {
			errs = append(errs, fmt.Errorf("args: %s is rendered by replan from %s; remove it", name, from))
		}
	}
	return errors.Join(errs...)
}

// megatronArchArgs are the architecture flags replan adds for model a:
// those the job's args do not give. --vocab-size is only added for
// Megatron's NullTokenizer (--tokenizer-type NullTokenizer in the args,
// the tokenizer of mock data): any other tokenizer brings its own
// vocabulary.
func megatronArchArgs(a perf.Arch, args []string) []string {
	var out []string
	for _, f := range archFlags {
		v := f.value(a)
		if v <= 0 {
			continue
		}
		if _, given := argValue(args, f.flag); given {
			continue
		}
		if f.flag == "--vocab-size" {
			if t, _ := argValue(args, "--tokenizer-type"); t != "NullTokenizer" {
				continue
			}
		}
		out = append(out, f.flag, itoa(v))
	}
	return out
}
