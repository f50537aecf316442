//go:build !(nvml && cgo)

package agent

import (
	"context"
	"fmt"
	"log/slog"
)

// NVMLAvailable reports whether this binary was built with the NVML backend.
const NVMLAvailable = false

// NewNVMLBackend always fails with ErrNoNVML: this binary was built without
// the "nvml" build tag (or without cgo).
func NewNVMLBackend(ctx context.Context, log *slog.Logger) (GPUBackend, error) {
	return nil, fmt.Errorf("%w: built without the nvml build tag (rebuild with -tags nvml and CGO_ENABLED=1)", ErrNoNVML)
}
