package cluster

import (
	"fmt"
	"time"
)

// Tier is how far apart two GPUs are in the network: the same server
// (NVLink), the same rack (RDMA through the top-of-rack switch) or different
// racks (through the spine). Tiers are ordered: a lower tier is faster.
type Tier int

// The placement tiers, fastest first.
const (
	TierServer Tier = iota
	TierRack
	TierCrossRack
)

// NumTiers is the number of tiers.
const NumTiers = 3

// String names the tier: "server", "rack" or "cross-rack".
func (t Tier) String() string {
	switch t {
	case TierServer:
		return "server"
	case TierRack:
		return "rack"
	case TierCrossRack:
		return "cross-rack"
	}
	return fmt.Sprintf("Tier(%d)", int(t))
}

// Link is the bandwidth and latency of one tier.
type Link struct {
	GBps    float64 // GB/s (bytes)
	Latency time.Duration
}

// Reference values for an A800 cluster.
const (
	A800NVLinkGBps       = 400
	A800RDMAGBps         = 100
	A800SpineGBps        = 200
	A800NVLinkLatency    = 2 * time.Microsecond
	A800RDMALatency      = 5 * time.Microsecond
	A800CrossRackLatency = 10 * time.Microsecond
)

// A800Links are the default per-tier links of the reference A800 cluster:
// 400 GB/s NVLink inside a server, 100 GB/s RDMA within a rack and the spine
// uplink across racks.
func A800Links() [NumTiers]Link {
	return [NumTiers]Link{
		TierServer:    {GBps: A800NVLinkGBps, Latency: A800NVLinkLatency},
		TierRack:      {GBps: A800RDMAGBps, Latency: A800RDMALatency},
		TierCrossRack: {GBps: A800SpineGBps, Latency: A800CrossRackLatency},
	}
}

// Topology is a read-only view of where servers sit and how fast each tier
// is. Build it with NewTopology; the zero value knows no servers.
type Topology struct {
	// Links holds one bandwidth and latency per tier. For TierServer it is
	// the slowest NVLink of any server, for TierRack the slowest NIC, for
	// TierCrossRack the slowest of NICs and rack spine uplinks.
	Links      [NumTiers]Link
	serverRack map[string]string
	server     map[string]Server
	spine      map[string]float64
}

// NewTopology builds the topology view of an inventory. Bandwidths come
// from the servers' nvlink_gbps / nic_gbps and the racks' spine_gbps;
// latencies from the A800 reference values.
func NewTopology(inv *Inventory) *Topology {
	t := &Topology{
		Links:      A800Links(),
		serverRack: map[string]string{},
		server:     map[string]Server{},
		spine:      map[string]float64{},
	}
	if inv == nil {
		return t
	}
	for _, r := range inv.Racks {
		t.spine[r.Name] = r.SpineGBps
	}
	minNV, minNIC, minSpine := 0.0, 0.0, 0.0
	for _, s := range inv.Servers {
		t.serverRack[s.Name] = s.Rack
		t.server[s.Name] = s
		minNV = minPositive(minNV, s.NVLinkGBps)
		minNIC = minPositive(minNIC, s.NICGBps)
	}
	for _, r := range inv.Racks {
		minSpine = minPositive(minSpine, r.SpineGBps)
	}
	if minNV > 0 {
		t.Links[TierServer].GBps = minNV
	}
	if minNIC > 0 {
		t.Links[TierRack].GBps = minNIC
	}
	if c := minPositive(minSpine, minNIC); c > 0 {
		t.Links[TierCrossRack].GBps = c
	}
	return t
}

func minPositive(a, b float64) float64 {
	switch {
	case b <= 0:
		return a
	case a <= 0 || b < a:
		return b
	}
	return a
}

// TierBetween reports the tier that connects two servers: TierServer when
// a and b are the same server, TierRack when they share a rack, TierCrossRack
// otherwise. It fails for a server the topology does not know.
func (t *Topology) TierBetween(a, b string) (Tier, error) {
	ra, ok := t.serverRack[a]
	if !ok {
		return 0, fmt.Errorf("topology: unknown server %q", a)
	}
	rb, ok := t.serverRack[b]
	if !ok {
		return 0, fmt.Errorf("topology: unknown server %q", b)
	}
	switch {
	case a == b:
		return TierServer, nil
	case ra == rb:
		return TierRack, nil
	}
	return TierCrossRack, nil
}

// Bandwidth is the per-tier bandwidth in GB/s.
func (t *Topology) Bandwidth(tier Tier) float64 {
	if tier < 0 || tier >= NumTiers {
		return 0
	}
	return t.Links[tier].GBps
}

// Latency is the per-tier latency.
func (t *Topology) Latency(tier Tier) time.Duration {
	if tier < 0 || tier >= NumTiers {
		return 0
	}
	return t.Links[tier].Latency
}

// BandwidthBetween is the bandwidth in GB/s of the slowest link on the path
// between two servers: NVLink inside one server, the slower NIC within a
// rack, and additionally the slower spine uplink across racks.
func (t *Topology) BandwidthBetween(a, b string) (float64, error) {
	tier, err := t.TierBetween(a, b)
	if err != nil {
		return 0, err
	}
	sa, sb := t.server[a], t.server[b]
	switch tier {
	case TierServer:
		return orDefault(sa.NVLinkGBps, t.Links[TierServer].GBps), nil
	case TierRack:
		return orDefault(minPositive(sa.NICGBps, sb.NICGBps), t.Links[TierRack].GBps), nil
	}
	bw := minPositive(sa.NICGBps, sb.NICGBps)
	bw = minPositive(bw, t.spine[sa.Rack])
	bw = minPositive(bw, t.spine[sb.Rack])
	return orDefault(bw, t.Links[TierCrossRack].GBps), nil
}

func orDefault(v, d float64) float64 {
	if v > 0 {
		return v
	}
	return d
}
