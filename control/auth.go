package control

// Identity and authorization: who calls, and what they may do.

import (
	"context"
	"net"
)

// Access is who may do what, from the inventory: the tenants' users and
// admins, the cluster's admins, and the tenants' CPU and memory quotas
// (GPU quotas are the daemon's TenantInfo).
type Access struct {
	// Admins may do everything (drain, undrain, act on every job).
	Admins  []string
	Tenants []TenantAccess
}

// TenantAccess is one tenant's users, admins and quotas.
type TenantAccess struct {
	Name       string
	Users      []string // who may submit under the tenant
	Admins     []string // who may act on all of the tenant's jobs
	QuotaCPUs  int      // 0: none set
	QuotaMemGB int      // 0: none set
	RunAs      string   // the Unix user the tenant's processes run as on the servers ("" : the agent's)
}

func (a *Access) tenant(name string) *TenantAccess {
	if a == nil {
		return nil
	}
	for i := range a.Tenants {
		if a.Tenants[i].Name == name {
			return &a.Tenants[i]
		}
	}
	return nil
}

type connKey struct{}

// connContext remembers each API connection in its requests' context, so
// the handler can ask it who is calling (peer credentials on the unix
// socket).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok {
		c = lc.Conn
	}
	return context.WithValue(ctx, connKey{}, c)
}
