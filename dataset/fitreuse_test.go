package dataset

import (
	"context"
	"math"
	"reflect"
	"testing"

	"github.com/replan/replan/perf"
)

// TestFitModelReusesComparisonFit: a model type with one placements
// table whose reading was chosen by comparing two fits takes the chosen
// reading's fit instead of fitting the same samples a third time, and
// gets the parameters and statistics of fitting them again, to the bit.
func TestFitModelReusesComparisonFit(t *testing.T) {
	dir := sharedData(t)
	ctx := context.Background()
	for _, name := range []string{"gpt2"} {
		a, _ := perf.Builtin(name)
		_, samples, choices, err := modelSamplesChoices(ctx, dir, name, perf.A800, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(choices) != 1 || choices[0].fit == nil || !sameSamples(choices[0].fit.samples, samples) {
			t.Fatalf("%s: %d tables read, the first compared: %v: the reuse is not reached", name, len(choices), len(choices) > 0 && choices[0].Compared)
		}
		refitChosen = true
		want, wst, werr := FitModelFor(ctx, dir, a, perf.A800, true)
		refitChosen = false
		got, gst, gerr := FitModelFor(ctx, dir, a, perf.A800, true)
		if werr != nil || gerr != nil {
			t.Fatal(werr, gerr)
		}
		wv, gv := want.Params.Vector(), got.Params.Vector()
		for i := range wv {
			if math.Float64bits(wv[i]) != math.Float64bits(gv[i]) {
				t.Errorf("%s: parameter %d: %v reused, %v fitted again", name, i, gv[i], wv[i])
			}
		}
		if !reflect.DeepEqual(wst, gst) {
			t.Errorf("%s: stats %+v reused, %+v fitted again", name, gst, wst)
		}
	}
	// a fit of other samples is not answered from the comparison's
	_, samples, choices, err := modelSamplesChoices(ctx, dir, "gpt2", perf.A800, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	samples[len(samples)-1].IterS *= 1.5
	m, _, _ := modelSamples(ctx, dir, "gpt2", perf.A800, true, nil)
	k, _, err := fitChosen(m, samples, choices[0])
	if err != nil {
		t.Fatal(err)
	}
	if k == choices[0].fit.params {
		t.Error("a fit of changed samples returned the comparison's parameters")
	}
}
