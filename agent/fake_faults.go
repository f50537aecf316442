package agent

// Faults injected into a running agent's fake backend through a file: a
// test on real hosts (control's fault end-to-end, make e2e-faults) writes
// FaultFileName in the agent's state directory, and the next GPU sample
// takes its lines as events and removes it.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// FaultFileName is the file in an agent's state directory whose lines
// the fake backend injects (only with --fake-gpus):
//
//	xid GPU CODE      an Xid event (e.g. "xid 1 79")
//	ecc-dbe GPU       a double-bit ECC error
//	ecc-sbe GPU       a single-bit ECC error
//
// Blank lines and lines starting with # are skipped. The file is removed
// once read; a bad line is an error naming the file and line (nothing of
// the file is injected).
const FaultFileName = "fake-faults"

// SetFaultFile makes the backend read faults from path at every
// HealthEvents (see FaultFileName).
func (f *FakeBackend) SetFaultFile(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faultFile = path
}

// readFaultFile injects the faults of the fault file, if there is one,
// and removes it.
func (f *FakeBackend) readFaultFile() error {
	f.mu.Lock()
	path := f.faultFile
	f.mu.Unlock()
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fake faults: %w", err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("fake faults: %w", err)
	}
	type fault struct {
		gpu  int
		kind string
		xid  uint64
	}
	var faults []fault
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		bad := func(why string) error { return fmt.Errorf("%s:%d: %q: %s", path, n, line, why) }
		want := map[string]int{"xid": 3, "ecc-dbe": 2, "ecc-sbe": 2}[fs[0]]
		if want == 0 {
			return bad("want xid, ecc-dbe or ecc-sbe")
		}
		if len(fs) != want {
			return bad(fmt.Sprintf("want %d fields", want))
		}
		g, err := strconv.Atoi(fs[1])
		if err != nil || g < 0 || g >= len(f.gpus) {
			return bad(fmt.Sprintf("GPU: want 0..%d", len(f.gpus)-1))
		}
		ft := fault{gpu: g}
		switch fs[0] {
		case "xid":
			if ft.xid, err = strconv.ParseUint(fs[2], 10, 64); err != nil {
				return bad("Xid code: want a number")
			}
			ft.kind = HealthXid
		case "ecc-dbe":
			ft.kind = HealthECCDBE
		case "ecc-sbe":
			ft.kind = HealthECCSBE
		}
		faults = append(faults, ft)
	}
	for _, ft := range faults {
		if err := f.inject(ft.gpu, ft.kind, ft.xid); err != nil {
			return err
		}
	}
	return nil
}
