package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestTailIsBounded: a log of one endless line (no newline) is not read
// whole by a tail; what comes back is its end, at most maxTailBytes.
func TestTailIsBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "output.log")
	big := bytes.Repeat([]byte("x"), 3*maxTailBytes)
	big = append(big, []byte("the end")...)
	if err := os.WriteFile(path, big, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := tailLines(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > maxTailBytes {
		t.Fatalf("tail read %d bytes of a %d-byte line, want at most %d", len(got), len(big), maxTailBytes)
	}
	if !bytes.HasSuffix(got, []byte("the end")) {
		t.Fatalf("tail lost the end of the log: ...%q", got[max(0, len(got)-20):])
	}
}
