package sim

import "testing"

// The oversubscription summary prints MET or MISSED only where links are
// contended: at a 1:1 spine nothing is shared and the 1.15× and 30 %
// targets do not apply (before, every 1:1 cell printed MISSED twice).
func TestContendedOnlyWhereSharingAdds(t *testing.T) {
	r := func(exposed, shared float64) *Result {
		x := &Result{}
		x.CommExposed, x.CommShared = exposed, shared
		return x
	}
	for _, c := range []struct {
		name string
		rs   []*Result
		want bool
	}{
		{"1:1, nothing shared", []*Result{r(3600, 0), r(3600, 0)}, false},
		{"elastic, 0.1 % shared", []*Result{r(46000, 3.6), r(51000, 50)}, false},
		{"morphling shares 8 %", []*Result{r(475000, 37000), r(360000, 7000)}, true},
		{"no communication", []*Result{r(0, 0)}, false},
	} {
		if got := contended(c.rs...); got != c.want {
			t.Errorf("%s: contended %v, want %v", c.name, got, c.want)
		}
	}
}
