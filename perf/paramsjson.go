package perf

import (
	"encoding/json"
	"fmt"
)

// UnmarshalJSON reads parameters as Params' fields name them. k_lo, the
// launch overlap exponent, reads as 1 (the launches add to the compute,
// the model before the term) where it is absent or 0: a model stored
// before it existed prices as it did. Below 1 (other than 0) it is
// outside f_k's definition and an error names it.
func (p *Params) UnmarshalJSON(b []byte) error {
	type plain Params // no methods: the default decoding
	q := plain(*p)
	q.KLO = 0
	if err := json.Unmarshal(b, &q); err != nil {
		return err
	}
	if q.KLO == 0 {
		q.KLO = 1
	}
	if !(q.KLO >= 1) {
		return fmt.Errorf("params: k_lo: want an overlap exponent of at least 1 (or absent: 1), got %g", q.KLO)
	}
	*p = Params(q)
	return nil
}
