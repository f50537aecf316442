package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupMemory creates per-process cgroup v2 groups under a replan subtree
// (default /sys/fs/cgroup/replan) to enforce memory limits. Every failure is
// a reason, never a failed start.
type cgroupMemory struct {
	mount string // cgroup v2 mount, normally /sys/fs/cgroup
	root  string // replan's subtree, e.g. /sys/fs/cgroup/replan
}

// prepare creates the group for id with memory.max = limit and returns its
// directory, opened, for clone3's CgroupFD.
func (c cgroupMemory) prepare(id string, limit uint64) (dir string, fd *os.File, err error) {
	ctrl, err := os.ReadFile(filepath.Join(c.mount, "cgroup.controllers"))
	if err != nil {
		return "", nil, fmt.Errorf("cgroup v2 not mounted at %s", c.mount)
	}
	if !hasWord(string(ctrl), "memory") {
		return "", nil, fmt.Errorf("cgroup v2 memory controller not available at %s", c.mount)
	}
	if err := os.MkdirAll(c.root, 0o755); err != nil {
		return "", nil, fmt.Errorf("create %s: %w", c.root, err)
	}
	// Enable the memory controller down to replan's subtree.
	rel, err := filepath.Rel(c.mount, c.root)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", nil, fmt.Errorf("cgroup root %s is not under %s", c.root, c.mount)
	}
	p := c.mount
	for _, part := range append([]string{""}, strings.Split(rel, string(filepath.Separator))...) {
		p = filepath.Join(p, part)
		if err := enableMemory(p); err != nil {
			return "", nil, err
		}
	}
	dir = filepath.Join(c.root, id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", nil, fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatUint(limit, 10)), 0o644); err != nil {
		os.Remove(dir)
		return "", nil, fmt.Errorf("write %s/memory.max: %w", dir, err)
	}
	// Without swap the limit means what it says; not every kernel has it.
	_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0o644)
	fd, err = os.Open(dir)
	if err != nil {
		os.Remove(dir)
		return "", nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return dir, fd, nil
}

func enableMemory(dir string) error {
	cur, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("read %s/cgroup.subtree_control: %w", dir, err)
	}
	if hasWord(string(cur), "memory") {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory"), 0o644); err != nil {
		return fmt.Errorf("enable memory controller in %s: %w", dir, err)
	}
	return nil
}

// remove deletes a process's group once it is empty (best effort).
func (c cgroupMemory) remove(dir string) {
	if dir != "" && strings.HasPrefix(dir, c.root+string(filepath.Separator)) {
		_ = os.Remove(dir)
	}
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}
