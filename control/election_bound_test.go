package control

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/replan/replan/internal/etcdtest"
	"github.com/replan/replan/internal/waitfor"
)

// holeProxy forwards TCP connections from a loopback listener to target,
// its answers (target to client) delayed by answerDelay, until it is
// holed: from then on it forwards nothing more that it reads, in either
// direction, and closes nothing (the network between a daemon and etcd
// went silent: no reset, no FIN, the client finds out only by waiting).
// What was already read before the hole is in flight and still arrives.
type holeProxy struct {
	ln          net.Listener
	target      string
	answerDelay time.Duration
	holed       atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
}

func startHoleProxy(t *testing.T, target string, answerDelay time.Duration) *holeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holeProxy{ln: ln, target: target, answerDelay: answerDelay, conns: []net.Conn{}}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's client URL.
func (p *holeProxy) Addr() string { return "http://" + p.ln.Addr().String() }

// hole stops all forwarding, on the connections open and on new ones.
func (p *holeProxy) hole() { p.holed.Store(true) }

// keep records c to be closed with the proxy; false (c closed) once the
// proxy is closed.
func (p *holeProxy) keep(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *holeProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.keep(c) {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.keep(up) {
			return
		}
		go p.pipe(up, c, 0)
		go p.pipe(c, up, p.answerDelay)
	}
}

// pipe copies src to dst, each chunk delay after it was read, while the
// proxy is not holed; once it is, what src sends is read and dropped.
func (p *holeProxy) pipe(dst, src net.Conn, delay time.Duration) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	q := make(chan chunk, 4096)
	go func() {
		for c := range q {
			time.Sleep(time.Until(c.due))
			if _, err := dst.Write(c.b); err != nil {
				return
			}
		}
	}()
	defer close(q)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.holed.Load() {
			q <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(delay)}
		}
		if err != nil {
			return
		}
	}
}

func (p *holeProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A leader cut off from etcd ends its term before another daemon is
// elected: leader A reaches etcd through a proxy that is then holed; B,
// waiting behind A, is elected once etcd expired A's lease. A's term must
// have ended (Done closed) strictly before B's Campaign returned: etcd
// counts A's lease from when it received A's last renewal, which is after
// A sent it, and A ends its term 3/4 of a TTL after it sent its last
// renewal that succeeded.
//
// Before that bound A stepped down when its client's keepalive deadline
// passed: one TTL after the answer to its last renewal, checked once a
// second. On a link that went silent at once, that came before or after B
// led depending on how the client's timers fell (here mostly before); on
// a link whose answers took 300 ms before it went silent, after, every
// time: the answer's delay is added to the client's deadline and not to
// etcd's. Both links, three times each, TTL 2s.
func TestElectionLeaderEndsTermBeforeSuccessorLeads(t *testing.T) {
	endpoint := etcdtest.Start(t)[0]
	for _, delay := range []time.Duration{0, 300 * time.Millisecond} {
		for i := range 3 {
			t.Run(fmt.Sprintf("answers+%v/%d", delay, i), func(t *testing.T) {
				leaderCutOff(t, endpoint, fmt.Sprintf("/test/bound-%d-%d/", delay.Milliseconds(), i), delay)
			})
		}
	}
}

func leaderCutOff(t *testing.T, endpoint, prefix string, answerDelay time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ttl = 2 * time.Second
	proxy := startHoleProxy(t, endpoint[len("http://"):], answerDelay)
	// A's client runs with gRPC keepalive off (the default, as the
	// daemon's): only the election notices the silence.
	ca, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	cb := electionClient(t, endpoint)
	elect := func(cli *clientv3.Client, name string) *Election {
		el, err := NewElection(ElectionConfig{Client: cli, Prefix: prefix, TTL: ttl, Self: Member{Name: name, Addr: "https://" + name + ":1"}})
		if err != nil {
			t.Fatal(err)
		}
		return el
	}
	a, b := elect(ca, "a"), elect(cb, "b")
	ta, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	aEnded := make(chan time.Time, 1)
	go func() {
		<-ta.Done()
		aEnded <- time.Now()
	}()
	type won struct {
		term *Term
		err  error
		at   time.Time
	}
	bWon := make(chan won, 1)
	go func() {
		term, err := b.Campaign(ctx)
		bWon <- won{term, err, time.Now()}
	}()
	// B waits behind A before the cut.
	waitfor.T(t, ctx, "B campaigning behind A", waitfor.Options{Stall: 30 * time.Second}, func() error {
		ms, err := b.Members(ctx)
		if err != nil {
			return err
		}
		if len(ms) != 2 || ms[0].Name != "a" {
			return fmt.Errorf("members %+v", ms)
		}
		return nil
	})
	select {
	case <-ta.Done():
		t.Fatalf("A's term ended before the cut: %v", ta.Err())
	default:
	}

	cut := time.Now()
	proxy.hole()
	var w won
	select {
	case w = <-bWon:
	case <-ctx.Done():
		t.Fatal("B was not elected after A was cut off")
	}
	if w.err != nil {
		t.Fatal(w.err)
	}
	defer w.term.Resign()
	if w.term.Epoch <= ta.Epoch {
		t.Errorf("B's epoch %d is not above A's %d", w.term.Epoch, ta.Epoch)
	}
	var aAt time.Time
	select {
	case aAt = <-aEnded:
	case <-ctx.Done():
		t.Fatal("A never stepped down")
	}
	t.Logf("after the cut: A's term ended at %v (%v), B led at %v", aAt.Sub(cut).Round(time.Millisecond), ta.Err(), w.at.Sub(cut).Round(time.Millisecond))
	if !aAt.Before(w.at) {
		t.Errorf("A still led %v after B was elected (A's term ended %v after the cut, B led %v after it): two leaders", aAt.Sub(w.at).Round(time.Millisecond), aAt.Sub(cut).Round(time.Millisecond), w.at.Sub(cut).Round(time.Millisecond))
	}
	if ta.Err() == nil {
		t.Error("A's term ended without a reason")
	}
}
