package sim

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkTable4 prints Table 4's four tables (benchTraces), the fit of
// their model types included; REPLAN_TABLE4_OUT=path writes them there.
func BenchmarkTable4(b *testing.B) {
	dir := filepath.Join("..", "..", "shared", "data", "morphling")
	if _, err := os.Stat(dir); err != nil {
		b.Skipf("skipped: the Morphling data is not at %s", dir)
	}
	var w io.Writer = io.Discard
	if p := os.Getenv("REPLAN_TABLE4_OUT"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		w = f
	}
	for b.Loop() {
		if err := benchTraces(context.Background(), w, dir); err != nil {
			b.Fatal(err)
		}
	}
}
