// Package labels is the syntax and matching of server labels (node
// features): an inventory gives each server labels (a list of names, or a
// mapping of names to values) and a job spec's constraint.labels lists the
// labels every server of the job must carry. A requirement is a name
// ("ib-hdr": the server carries the label, whatever its value) or
// name=value ("gpu=a800-80g": the label with exactly that value). It is
// pure: cluster, jobspec, sched and control share it.
package labels

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// MaxLen is the longest label name or value.
const MaxLen = 63

var nameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?$`)

// CheckName reports why name is not a valid label name, or nil: 1 to 63
// letters, digits, '-', '_', '.' or '/', starting and ending with a
// letter or digit.
func CheckName(name string) error {
	if name == "" {
		return fmt.Errorf("a label name must not be empty")
	}
	if len(name) > MaxLen {
		return fmt.Errorf("label name %.20q… is %d characters, at most %d", name, len(name), MaxLen)
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("label name %q: want letters, digits, '-', '_', '.' or '/', starting and ending with a letter or digit", name)
	}
	return nil
}

// CheckValue reports why v is not a valid label value, or nil: empty, or
// what a name may be.
func CheckValue(v string) error {
	if v == "" {
		return nil
	}
	if len(v) > MaxLen || !nameRE.MatchString(v) {
		return fmt.Errorf("label value %q: want at most %d letters, digits, '-', '_', '.' or '/', starting and ending with a letter or digit", v, MaxLen)
	}
	return nil
}

// CheckRequirement reports why req is not a valid requirement ("name" or
// "name=value"), or nil.
func CheckRequirement(req string) error {
	name, val, hasVal := strings.Cut(req, "=")
	if err := CheckName(name); err != nil {
		return err
	}
	if hasVal {
		if val == "" {
			return fmt.Errorf("requirement %q: want name or name=value with a value", req)
		}
		return CheckValue(val)
	}
	return nil
}

// Has reports whether a server with labels have meets the requirement req.
func Has(have map[string]string, req string) bool {
	name, val, hasVal := strings.Cut(req, "=")
	v, ok := have[name]
	return ok && (!hasVal || v == val)
}

// Match reports whether a server with labels have meets every requirement
// of want (true when want is empty).
func Match(have map[string]string, want []string) bool {
	for _, r := range want {
		if !Has(have, r) {
			return false
		}
	}
	return true
}

// Missing lists the requirements of want that have does not meet.
func Missing(have map[string]string, want []string) []string {
	var out []string
	for _, r := range want {
		if !Has(have, r) {
			out = append(out, r)
		}
	}
	return out
}

// Format is labels as one sorted, comma-separated list: "name" for a label
// without a value, "name=value" otherwise ("" when there are none).
func Format(have map[string]string) string {
	keys := make([]string, 0, len(have))
	for k := range have {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		if v := have[k]; v != "" {
			keys[i] = k + "=" + v
		}
	}
	return strings.Join(keys, ",")
}
