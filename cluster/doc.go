// Package cluster holds replan's plain description of the hardware it
// manages: servers, racks, tenants, the SSH options used to reach servers,
// and a small topology view (server < rack < cross-rack tiers with their
// bandwidth and latency).
//
// The inventory comes from inventory.yaml (see docs/inventory.md). Parse and
// Load validate the whole file at once and report every problem with the
// file, line and field that caused it:
//
//	inventory.yaml:14: servers[2].rack: unknown rack "rack-c"
//
// All problems are joined with errors.Join; Problems recovers them as
// structured values. When there is any problem the loader returns a nil
// *Inventory, so a bad file never half-configures the cluster.
//
// The package does no I/O beyond reading the inventory file and checking
// that the identity files it names exist (through an injectable stat
// function, see Options).
package cluster
