package control

import (
	"strings"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/launch"
)

// placementWords writes a placement for people: "a800-03 [0-3]", or
// "2 servers × 8 GPUs: a800-01 [0-7], a800-02 [0-7]".
func placementWords(servers []launch.Server) string {
	parts := make([]string, 0, len(servers))
	counts := make([]int, 0, len(servers))
	for _, s := range servers {
		parts = append(parts, cluster.ServerGPUs(s.Name, s.GPUs))
		counts = append(counts, len(s.GPUs))
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return cluster.PlacementText(counts) + ": " + strings.Join(parts, ", ")
}
