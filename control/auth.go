package control

// Identity and authorization: who calls, and what they may do.
//
// Every request has a user: on the unix socket the caller's uid from the
// connection's peer credentials (SO_PEERCRED), on the TCP listener the
// user whose token the Bearer header carries. Roles come from the
// inventory (Access): tenants[].users may submit under their tenant and act
// on their own jobs, tenants[].admins on all of the tenant's jobs, the
// top-level admins (and root, and the daemon's own user) on everything,
// drain and undrain included. Without any tenants[].users or .admins the
// daemon is single-user: everyone who can open the socket may do
// everything, as before.

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/replan/replan/cluster"
)

// Access is who may do what, from the inventory: the tenants' users and
// admins, the cluster's admins, and the tenants' CPU and memory quotas
// (GPU quotas are the daemon's TenantInfo).
type Access struct {
	// Admins may do everything (drain, undrain, act on every job).
	Admins  []string
	Tenants []TenantAccess
	// DaemonUID is the daemon's own uid: an admin, like root.
	DaemonUID int
	// Tokens maps a user of the TCP listener to the SHA-256 of its token
	// (the tokens file); nil: no per-user tokens.
	Tokens map[string][sha256.Size]byte
}

// TenantAccess is one tenant's users, admins and quotas.
type TenantAccess struct {
	Name       string
	Users      []string // who may submit under the tenant
	Admins     []string // who may act on all of the tenant's jobs
	QuotaCPUs  int      // 0: none set
	QuotaMemGB int      // 0: none set
	RunAs      string   // the Unix user the tenant's processes run as on the servers ("": the agent's)
}

// AccessFromInventory is the inventory's users, admins and quotas; the
// daemon's own uid is an admin.
func AccessFromInventory(inv *cluster.Inventory) *Access {
	a := &Access{Admins: inv.Admins, DaemonUID: os.Getuid()}
	for _, t := range inv.Tenants {
		a.Tenants = append(a.Tenants, TenantAccess{Name: t.Name, Users: t.Users, Admins: t.Admins, QuotaCPUs: t.CPUQuota, QuotaMemGB: t.MemoryQuotaGB, RunAs: t.RunAs})
	}
	return a
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

// MultiUser reports whether any tenant lists users or admins; otherwise
// the daemon is single-user and authorizes everything.
func (a *Access) MultiUser() bool {
	if a == nil {
		return false
	}
	for _, t := range a.Tenants {
		if len(t.Users) > 0 || len(t.Admins) > 0 {
			return true
		}
	}
	return false
}

// Identity is who calls the API, as the daemon sees it.
type Identity struct {
	User string `json:"user"`
	UID  int    `json:"uid"` // -1 when the caller came with a token
	Via  string `json:"via"` // "unix" (peer credentials) or "token" (TCP listener)
}

// WhoAmI is GET /v1/whoami: the caller and its role.
type WhoAmI struct {
	Identity
	// Role is "admin", "tenant-admin", "user" or "none".
	Role string `json:"role"`
	// Tenants are those the caller may submit under; AdminOf those whose
	// jobs it may act on.
	Tenants []string `json:"tenants"`
	AdminOf []string `json:"admin_of"`
	// SingleUser: the inventory lists no users, everyone may do everything.
	SingleUser bool `json:"single_user"`
}

func (a *Access) isAdmin(id Identity) bool {
	if id.UID == 0 || (id.UID > 0 && id.UID == daemonUID(a)) {
		return true
	}
	return a != nil && slices.Contains(a.Admins, id.User)
}

// whoami is id's role.
func (a *Access) whoami(id Identity) WhoAmI {
	w := WhoAmI{Identity: id, Tenants: []string{}, AdminOf: []string{}, SingleUser: !a.MultiUser()}
	if a != nil {
		for _, t := range a.Tenants {
			if w.SingleUser || a.isAdmin(id) || slices.Contains(t.Admins, id.User) {
				w.AdminOf = append(w.AdminOf, t.Name)
			}
			if w.SingleUser || a.isAdmin(id) || slices.Contains(t.Admins, id.User) || slices.Contains(t.Users, id.User) {
				w.Tenants = append(w.Tenants, t.Name)
			}
		}
	}
	switch {
	case w.SingleUser || a.isAdmin(id):
		w.Role = "admin"
	case len(w.AdminOf) > 0:
		w.Role = "tenant-admin"
	case len(w.Tenants) > 0:
		w.Role = "user"
	default:
		w.Role = "none"
	}
	return w
}

// Forbidden is a request the caller's role does not allow: the API answers
// 403 with the rule.
type Forbidden struct {
	Rule string // submit, job-owner, admin
	Msg  string
}

func (e *Forbidden) Error() string { return fmt.Sprintf("forbidden by rule %s: %s", e.Rule, e.Msg) }

// canSubmit: only under a tenant the caller belongs to.
func (a *Access) canSubmit(id Identity, tenant string) error {
	if !a.MultiUser() || a.isAdmin(id) {
		return nil
	}
	if t := a.tenant(tenant); t != nil && (slices.Contains(t.Users, id.User) || slices.Contains(t.Admins, id.User)) {
		return nil
	}
	return &Forbidden{"submit", fmt.Sprintf("user %s may not submit under tenant %s (not in its users or admins in the inventory)", id.User, tenant)}
}

// canActOn: a job's owner, its tenant's admins and the admins.
func (a *Access) canActOn(id Identity, op string, j JobRecord, owner string) error {
	if !a.MultiUser() || a.isAdmin(id) || (owner != "" && owner == id.User) {
		return nil
	}
	if t := a.tenant(j.Tenant); t != nil && slices.Contains(t.Admins, id.User) {
		return nil
	}
	if owner == "" {
		owner = "unknown"
	}
	return &Forbidden{"job-owner", fmt.Sprintf("user %s may not %s job %s of user %s (tenant %s): only its owner, the tenant's admins and the cluster's admins may", id.User, op, j.ID, owner, j.Tenant)}
}

// canAdmin: drain and undrain.
func (a *Access) canAdmin(id Identity, op string) error {
	if !a.MultiUser() || a.isAdmin(id) {
		return nil
	}
	return &Forbidden{"admin", fmt.Sprintf("user %s may not %s: only the cluster's admins (the inventory's admins, root and the daemon's user) may", id.User, op)}
}

type connKey struct{}

type callerKey struct{}

// connContext remembers each API connection in its requests' context, so
// the handler can ask it who is calling (peer credentials on the unix
// socket).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok {
		c = lc.Conn
	}
	return context.WithValue(ctx, connKey{}, c)
}

// withCaller is ctx carrying the caller: the store records it as a new
// job's owner and as the user of every event the request causes.
func withCaller(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, callerKey{}, id)
}

// callerOf is the caller ctx carries (zero: the daemon itself).
func callerOf(ctx context.Context) Identity {
	id, _ := ctx.Value(callerKey{}).(Identity)
	return id
}

// ErrUnauthenticated is a request without a usable identity.
var ErrUnauthenticated = errors.New("unauthenticated")

// identify finds who makes request r: the peer credentials of a unix
// socket, or the Bearer token of a TCP (TLS) connection.
func (a *API) identify(r *http.Request) (Identity, error) {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if uc, ok := c.(*net.UnixConn); ok {
		uid, err := peerUID(uc)
		if err != nil && !a.Access.MultiUser() {
			// Single-user: the socket's mode 0600 already says who calls.
			return Identity{User: userName(os.Getuid()), UID: os.Getuid(), Via: "unix"}, nil
		}
		if err != nil {
			return Identity{}, fmt.Errorf("%w: peer credentials: %v", ErrUnauthenticated, err)
		}
		return Identity{User: userName(uid), UID: uid, Via: "unix"}, nil
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		if a.Token == "" && (a.Access == nil || a.Access.Tokens == nil) && c == nil {
			// An in-process handler (tests, no connection): the daemon's user.
			return Identity{User: userName(os.Getuid()), UID: os.Getuid(), Via: "local"}, nil
		}
		return Identity{}, fmt.Errorf("%w: missing bearer token", ErrUnauthenticated)
	}
	if a.Access != nil && a.Access.Tokens != nil {
		h := sha256.Sum256([]byte(tok))
		found := ""
		for u, want := range a.Access.Tokens {
			if subtle.ConstantTimeCompare(h[:], want[:]) == 1 {
				found = u
			}
		}
		if found != "" {
			return Identity{User: found, UID: -1, Via: "token"}, nil
		}
	}
	if a.Token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(a.Token)) == 1 {
		if id, ok := a.forwardedIdentity(r, tok); ok {
			return id, nil // a follower speaks for its caller (ha.go)
		}
		// The single shared token of --token-file speaks for the daemon's
		// own user, as it always did.
		return Identity{User: userName(os.Getuid()), UID: os.Getuid(), Via: "token"}, nil
	}
	return Identity{}, fmt.Errorf("%w: wrong bearer token", ErrUnauthenticated)
}

func daemonUID(a *Access) int {
	if a == nil {
		return os.Getuid()
	}
	return a.DaemonUID
}

var userNames sync.Map

// userName is the name of uid (its number when it has none).
func userName(uid int) string {
	if v, ok := userNames.Load(uid); ok {
		return v.(string)
	}
	name := strconv.Itoa(uid)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
		userNames.Store(uid, name)
	}
	return name
}

// authorize wraps the API's routes: every request is identified (401
// otherwise) and carries its caller in its context; the rules themselves
// are checked by the handlers that know the job or tenant.
func (a *API) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := a.identify(r)
		if err != nil {
			writeErr(w, http.StatusUnauthorized, err)
			return
		}
		// The connection is now the caller's (listen.go): it counts
		// against the caller's share, or waits for a slot.
		if err := claimConn(r.Context(), id.User, a.Access.isAdmin(id)); err != nil {
			w.Header().Set("Connection", "close")
			w.Header().Set("Retry-After", "1")
			writeErr(w, http.StatusServiceUnavailable, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(withCaller(r.Context(), id)))
	})
}

// jobOwnerStore finds who submitted a job.
type jobOwnerStore interface {
	JobOwner(ctx context.Context, id string) (string, error)
}

// JobOwner is the user who submitted job id ("" when not recorded).
func (s *SQLite) JobOwner(ctx context.Context, id string) (string, error) {
	var u string
	err := s.db.QueryRowContext(ctx, `SELECT user FROM job_owners WHERE job_id = ?`, id).Scan(&u)
	if err != nil && !strings.Contains(err.Error(), "no rows") {
		return "", err
	}
	return u, nil
}

// checkJobOp applies the job-owner rule to op on job id.
func (a *API) checkJobOp(ctx context.Context, op, id string) error {
	if !a.Access.MultiUser() {
		return nil
	}
	j, err := a.D.cfg.Store.GetJob(ctx, id)
	if err != nil {
		return err
	}
	return a.jobRule(ctx, op, j)
}

// jobRule applies the job-owner rule to op on job j: its owner, its
// tenant's admins and the admins (everyone in a single-user daemon).
func (a *API) jobRule(ctx context.Context, op string, j JobRecord) error {
	return jobRuleIn(ctx, a.Access, a.D.cfg.Store, op, j)
}

// jobRuleIn is jobRule with the job's owner read from st: the daemon's
// store, or a follower's view of it (followview.go).
func jobRuleIn(ctx context.Context, acc *Access, st storeReads, op string, j JobRecord) error {
	if !acc.MultiUser() {
		return nil
	}
	owner := ""
	if ows, ok := st.(jobOwnerStore); ok {
		var err error
		if owner, err = ows.JobOwner(ctx, j.ID); err != nil {
			return err
		}
	}
	return acc.canActOn(callerOf(ctx), op, j, owner)
}
