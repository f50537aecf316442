package common

import "testing"

func TestRate(t *testing.T) {
	for v, want := range map[float64]string{0.823: "0.82", 9.994: "9.99", 9.996: "10.0", 33.84: "33.8", 99.96: "100", 1244.3: "1244", 9999.4: "9999", 10_740: "10.7k", 999_940: "999.9k", 2_345_000: "2.3M"} {
		if got := Rate(v); got != want {
			t.Errorf("Rate(%v) = %q, want %q", v, got, want)
		}
	}
}
