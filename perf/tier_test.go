package perf

import (
	"encoding/json"
	"testing"
)

// TestTierJSONByName: tiers are names in JSON (accept_tier, pin.tiers),
// and numbers from older stores still read.
func TestTierJSONByName(t *testing.T) {
	b, err := json.Marshal(struct {
		Accept Tier   `json:"accept_tier"`
		Tiers  []Tier `json:"tiers"`
	}{TierRack, []Tier{TierServer, TierCrossRack}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"accept_tier":"rack","tiers":["server","cross-rack"]}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	var ts []Tier
	if err := json.Unmarshal([]byte(`["cross-rack", 1, "server"]`), &ts); err != nil || len(ts) != 3 || ts[0] != TierCrossRack || ts[1] != TierRack || ts[2] != TierServer {
		t.Errorf("read %v, %v", ts, err)
	}
	if err := json.Unmarshal([]byte(`"rackk"`), new(Tier)); err == nil {
		t.Error("a bad name read without error")
	}
}
