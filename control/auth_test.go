package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replan/replan/sched"
)

const authHelperEnv = "REPLAN_AUTH_HELPER"

// TestAuthHelper is not a test: TestAuthTwoRealUsers runs the test binary
// as another Unix user with this test selected, to make one API request
// over the socket (method, path, socket in the environment; the body on
// stdin). It prints the status and the body between markers.
func TestAuthHelper(t *testing.T) {
	v := os.Getenv(authHelperEnv)
	if v == "" {
		t.Skip("helper process of TestAuthTwoRealUsers")
	}
	parts := strings.SplitN(v, "|", 3)
	body, _ := io.ReadAll(os.Stdin)
	cl := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", parts[0])
	}}, Timeout: 20 * time.Second}
	req, _ := http.NewRequest(parts[1], "http://replan"+parts[2], bytes.NewReader(body))
	resp, err := cl.Do(req)
	if err != nil {
		fmt.Printf("\n@@@0\n%v\n@@@\n", err)
		os.Exit(0)
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("\n@@@%d\n%s\n@@@\n", resp.StatusCode, b)
	os.Exit(0)
}

// makeUser creates a Unix user for the test and removes it afterwards.
func makeUser(t *testing.T, name string) (uint32, uint32) {
	t.Helper()
	exec.Command("userdel", name).Run() // a leftover of a killed run
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Skipf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uint32(uid), uint32(gid)
}

// Issue 12: anyone who could reach the API could cancel or drain anything
// and submit under any tenant. Two real local users, created here, talk to
// the daemon's socket as themselves (the daemon reads their uid from the
// connection's peer credentials): each may submit only under its tenant,
// act only on its own jobs, never drain; every event names who caused it.
func TestAuthTwoRealUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates two Unix users (useradd) and connects to the socket as them")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("no useradd on this machine")
	}
	ctx := context.Background()
	aliceUID, aliceGID := makeUser(t, "rpl12-alice")
	bobUID, bobGID := makeUser(t, "rpl12-bob")
	dir, err := os.MkdirTemp("", "replan-auth-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "control.test")
	self, _ := os.ReadFile(os.Args[0])
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}

	st, _ := openTest(t)
	p, _ := sched.New("morphling")
	d, err := New(ctx, Config{Store: st, Exec: &recorder{}, Policy: p,
		Servers: []ServerInfo{{Name: "a", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}, {Name: "b", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 16}, {Name: "product", QuotaGPUs: 16}}})
	if err != nil {
		t.Fatal(err)
	}
	acc := &Access{DaemonUID: os.Getuid(), Tenants: []TenantAccess{
		{Name: "research", Users: []string{"rpl12-alice"}},
		{Name: "product", Users: []string{"rpl12-bob"}},
	}}
	sock := filepath.Join(dir, "replan.sock")
	l, err := ListenUnixShared(sock)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go Serve(sctx, l, (&API{D: d, Version: "test", Access: acc}).Handler())

	as := func(uid, gid uint32, method, path string, body any) (int, string) {
		t.Helper()
		var in []byte
		if body != nil {
			in, _ = json.Marshal(body)
		}
		cmd := exec.Command(bin, "-test.run=^TestAuthHelper$")
		cmd.Env = []string{authHelperEnv + "=" + sock + "|" + method + "|" + path}
		cmd.Stdin = bytes.NewReader(in)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
		out, err := cmd.CombinedOutput()
		s := string(out)
		i := strings.Index(s, "\n@@@")
		if i < 0 {
			t.Fatalf("helper as uid %d: %v\n%s", uid, err, out)
		}
		s = s[i+4:]
		nl := strings.IndexByte(s, '\n')
		code, _ := strconv.Atoi(s[:nl])
		return code, strings.TrimSuffix(s[nl+1:], "\n@@@\n")
	}
	spec := func(name, tenant string) SubmitRequest {
		return SubmitRequest{File: name + ".yaml", Spec: strings.Replace(strings.Replace(admitSpec(map[string]string{"tenant": tenant}), "name: x", "name: "+name, 1), "gpus: 4", "gpus: 2", 1)}
	}

	code, body := as(aliceUID, aliceGID, "GET", "/v1/whoami", nil)
	var who WhoAmI
	json.Unmarshal([]byte(body), &who)
	if code != 200 || who.User != "rpl12-alice" || who.UID != int(aliceUID) || who.Role != "user" || strings.Join(who.Tenants, ",") != "research" || who.SingleUser {
		t.Fatalf("alice whoami: %d %s", code, body)
	}
	if code, body := as(aliceUID, aliceGID, "POST", "/v1/jobs", spec("sneaky", "product")); code != 403 || !strings.Contains(body, "rule submit") {
		t.Errorf("alice submitting under product: %d %s", code, body)
	}
	code, body = as(aliceUID, aliceGID, "POST", "/v1/jobs", spec("mine", "research"))
	var job JobRecord
	json.Unmarshal([]byte(body), &job)
	if code != 201 || job.ID == "" {
		t.Fatalf("alice submitting under research: %d %s", code, body)
	}
	if code, body := as(bobUID, bobGID, "POST", "/v1/jobs/"+job.ID+"/cancel", nil); code != 403 || !strings.Contains(body, "rule job-owner") || !strings.Contains(body, "rpl12-alice") {
		t.Errorf("bob cancelling alice's job: %d %s", code, body)
	}
	if code, body := as(bobUID, bobGID, "POST", "/v1/nodes/a/drain", nil); code != 403 || !strings.Contains(body, "rule admin") {
		t.Errorf("bob draining: %d %s", code, body)
	}
	if code, body := as(bobUID, bobGID, "POST", "/v1/nodes/a/gpus/3/uncordon", nil); code != 403 || !strings.Contains(body, "rule admin") || !strings.Contains(body, "uncordon a GPU of a") {
		t.Errorf("bob uncordoning: %d %s", code, body)
	}
	if code, body := as(aliceUID, aliceGID, "POST", "/v1/jobs/"+job.ID+"/hold", nil); code != 200 {
		t.Errorf("alice holding her job: %d %s", code, body)
	}
	if r, _ := st.GetJob(ctx, job.ID); r.State != StateHeld {
		t.Errorf("job %s after bob's refused cancel and alice's hold: %s", job.ID, r.State)
	}
	// Reads are open to every local user.
	if code, _ := as(bobUID, bobGID, "GET", "/v1/queue", nil); code != 200 {
		t.Errorf("bob reading the queue: %d", code)
	}
	// Root (the daemon's user here) is an admin.
	root := NewUnixClient(sock)
	if w, err := root.WhoAmI(ctx); err != nil || w.Role != "admin" {
		t.Errorf("root whoami %+v %v", w, err)
	}
	if _, err := root.NodeOp(ctx, "a", "drain"); err != nil {
		t.Errorf("root draining: %v", err)
	}
	if err := root.Uncordon(ctx, "a", 3); err == nil || !strings.Contains(err.Error(), "not cordoned") {
		t.Errorf("root uncordoning a GPU that is not cordoned: %v", err) // allowed, and refused for the GPU's state
	}
	evs, _ := st.Events(ctx, 0, 100)
	got := map[string]string{}
	for _, e := range evs {
		got[e.Kind] = e.User
	}
	me, _ := user.Current()
	if got["submit"] != "rpl12-alice" || got["held"] != "rpl12-alice" || got["drain"] != me.Username {
		t.Errorf("events' users %v", got)
	}
}
