package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A --socket that names an existing regular file is refused and the file
// is left as it was (it used to be deleted as a "stale socket").
func TestListenRefusesNonSocketFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(p, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := ListenUnix(context.Background(), p)
	if err == nil {
		ln.Close()
		t.Fatal("listened on a regular file")
	}
	if !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("error does not say why: %v", err)
	}
	if b, rerr := os.ReadFile(p); rerr != nil || string(b) != "keep me" {
		t.Fatalf("the file was changed or removed: %q %v", b, rerr)
	}
}
