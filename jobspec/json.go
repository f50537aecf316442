package jobspec

import "encoding/json"

// UnmarshalJSON decodes a request as the daemon stores it and sets HasPlan,
// which JSON leaves out, from its plan: a plan parsed from a spec always
// has DP ≥ 1, an absent one is zero. Specs stored with "has_plan" decode
// the same.
func (r *Request) UnmarshalJSON(b []byte) error {
	type request Request // the fields, without this method
	var v request
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = Request(v)
	r.HasPlan = r.Plan.DP > 0
	return nil
}
