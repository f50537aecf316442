package cluster

// How placements are written for people: "2 servers × 8 GPUs",
// "a800-03 [0-3]", never the Morphling data's compact "88" or "2211".

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// GPUCount is "1 GPU" or "n GPUs".
func GPUCount(n int) string {
	if n == 1 {
		return "1 GPU"
	}
	return strconv.Itoa(n) + " GPUs"
}

// PlacementText writes GPUs per server: "1 server × 4 GPUs",
// "2 servers × 8 GPUs", "3 servers (8+8+4 GPUs)"; "no GPUs" when empty.
func PlacementText(perServer []int) string {
	var pl []int
	for _, g := range perServer {
		if g > 0 {
			pl = append(pl, g)
		}
	}
	if len(pl) == 0 {
		return "no GPUs"
	}
	sort.Sort(sort.Reverse(sort.IntSlice(pl)))
	servers := "1 server"
	if len(pl) > 1 {
		servers = strconv.Itoa(len(pl)) + " servers"
	}
	if pl[0] == pl[len(pl)-1] {
		return servers + " × " + GPUCount(pl[0])
	}
	parts := make([]string, len(pl))
	for i, g := range pl {
		parts[i] = strconv.Itoa(g)
	}
	return servers + " (" + strings.Join(parts, "+") + " GPUs)"
}

// ServerGPUs writes one server's share of a placement: "a800-03 [0-3]",
// "a800-01 [0-3,6]".
func ServerGPUs(server string, gpus []int) string {
	return server + " [" + Ranges(gpus) + "]"
}

// Ranges writes indices sorted, runs as ranges: "0-3,6".
func Ranges(ix []int) string {
	ix = append([]int(nil), ix...)
	sort.Ints(ix)
	var parts []string
	for i := 0; i < len(ix); {
		j := i
		for j+1 < len(ix) && ix[j+1] == ix[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ix[i], ix[j]))
		} else {
			parts = append(parts, strconv.Itoa(ix[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
