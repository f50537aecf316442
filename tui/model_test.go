package tui

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"

	"github.com/replan/replan/tui/data"
	"github.com/replan/replan/tui/tuitest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// harness is the root model over a fake backend, with the clock stopped:
// time moves only by TickMsgs the test sends.
type harness struct {
	t    *testing.T
	m    *model
	fake *tuitest.Fake
	now  time.Time
}

func newHarness(t *testing.T) *harness {
	fake := &tuitest.Fake{Snap: tuitest.Small()}
	m := newModel(context.Background(), fake, Options{Profile: colorprofile.NoTTY})
	m.tick = func() tea.Cmd { return nil }
	h := &harness{t: t, m: m, fake: fake, now: tuitest.T0}
	m.clock = func() time.Time { return h.now }
	m.now = h.now
	h.send(tea.WindowSizeMsg{Width: 80, Height: 24})
	h.run(m.Init())
	return h
}

// run executes cmd and feeds what it produces back into the model,
// breadth first, at most 200 messages (the long poll would go on).
func (h *harness) run(cmd tea.Cmd) {
	queue := []tea.Cmd{cmd}
	for n := 0; len(queue) > 0 && n < 200; n++ {
		c := queue[0]
		queue = queue[1:]
		if c == nil {
			continue
		}
		msg := c()
		if b, ok := msg.(tea.BatchMsg); ok {
			queue = append(queue, b...)
			continue
		}
		if msg == nil {
			continue
		}
		if _, ok := msg.(tea.QuitMsg); ok {
			continue
		}
		_, next := h.m.Update(msg)
		queue = append(queue, next)
	}
}

func (h *harness) send(msg tea.Msg) {
	_, cmd := h.m.Update(msg)
	h.run(cmd)
}

func (h *harness) press(keys ...string) {
	for _, k := range keys {
		h.send(tuitest.Key(k))
	}
}

func (h *harness) tick(d time.Duration) {
	h.now = h.now.Add(d)
	h.send(data.TickMsg{Now: h.now})
}

func (h *harness) view() string {
	h.t.Helper()
	v := h.m.View().Content
	tuitest.CheckSize(h.t, v, h.m.width, h.m.height)
	return v
}

// TestGoldenEveryScreen keeps every screen at 80×24 and 160×48.
func TestGoldenEveryScreen(t *testing.T) {
	for _, sz := range [][2]int{{80, 24}, {160, 48}} {
		h := newHarness(t)
		h.send(tea.WindowSizeMsg{Width: sz[0], Height: sz[1]})
		h.press("4", "j", "j", "enter") // a job's detail
		for i, name := range screenNames {
			h.press(fmt.Sprint(i + 1))
			tuitest.Golden(t, fmt.Sprintf("screen-%s-%dx%d", name, sz[0], sz[1]), h.view(), *update)
		}
	}
}

// TestHistoryScreen: 8 lists the jobs that ended, like sacct; enter opens
// one.
func TestHistoryScreen(t *testing.T) {
	h := newHarness(t)
	h.press("8")
	v := h.view()
	for _, want := range []string{"2 ended: 1 finished · 1 failed", "j-000010", "1h35m", "j-000009", "failed"} {
		if !strings.Contains(v, want) {
			t.Errorf("history lacks %q:\n%s", want, v)
		}
	}
	h.press("enter")
	if h.m.active != scDetail {
		t.Errorf("enter went to %s", screenNames[h.m.active])
	}
}

// TestOverviewIsTheFirstScreen: the first screen shows the grid, the
// queue with its estimated starts and timers, and the running jobs with
// their plan, throughput and progress.
func TestOverviewIsTheFirstScreen(t *testing.T) {
	h := newHarness(t)
	if h.m.active != scOverview {
		t.Fatalf("starts on %s", screenNames[h.m.active])
	}
	v := h.view()
	for _, want := range []string{"srv-01 aaaaaaaa", "WAITING", "in 25m00s", "2m00s", "RUNNING", "DP8·TP2·PP1", "14.2/21.0", "7%", "restarting, 3m left"} {
		if !strings.Contains(v, want) {
			t.Errorf("overview lacks %q:\n%s", want, v)
		}
	}
	// a tick counts the countdowns down at the backend's rate
	h.m.pending = 4 // hold the next poll back
	h.m.speed = 60
	h.tick(time.Second)
	if v := h.view(); !strings.Contains(v, "in 24m00s") {
		t.Errorf("one second at ×60 later:\n%s", v)
	}
}

func TestGoldenFrames(t *testing.T) {
	h := newHarness(t)
	tuitest.Golden(t, "overview", h.view(), *update)
	h.press("?")
	tuitest.Golden(t, "help", h.view(), *update)
	h.press("x") // any key closes help
	if strings.Contains(h.view(), "Keys everywhere") {
		t.Error("help still open")
	}
}

// Issue 28: the help page swallowed the next key. A key pressed on it
// closes it and does what it does; `?` and esc only close it.
func TestHelpPassesTheKeyOn(t *testing.T) {
	h := newHarness(t)
	h.press("?", "2")
	if h.m.help || h.m.active != scCluster {
		t.Fatalf("2 on the help page: help %v, on %s", h.m.help, screenNames[h.m.active])
	}
	h.press("?", "j")
	if h.m.help || h.m.cluster.Selected() != "srv-02" {
		t.Errorf("j on the help page: help %v, selected %s", h.m.help, h.m.cluster.Selected())
	}
	h.press("4", "j", "enter", "?", "esc")
	if h.m.help || h.m.active != scDetail {
		t.Errorf("esc on the help page: help %v, on %s (it should only close help)", h.m.help, screenNames[h.m.active])
	}
	h.press("?", "?")
	if h.m.help || h.m.active != scDetail {
		t.Errorf("? on the help page: help %v, on %s", h.m.help, screenNames[h.m.active])
	}
}

func TestKeysSwitchScreensAndMoveCursor(t *testing.T) {
	h := newHarness(t)
	if h.m.active != scOverview {
		t.Fatalf("starts on %s", screenNames[h.m.active])
	}
	h.press("3")
	if h.m.active != scQueue || !strings.Contains(h.view(), "3 waiting") {
		t.Fatalf("3: on %s:\n%s", screenNames[h.m.active], h.view())
	}
	h.press("j")
	if got := h.m.queue.Selected(); got != "j-000007" {
		t.Errorf("j on the queue selected %s", got)
	}
	h.press("tab")
	if h.m.active != scJobs {
		t.Errorf("tab from queue went to %s", screenNames[h.m.active])
	}
	h.press("shift+tab", "shift+tab")
	if h.m.active != scCluster {
		t.Errorf("shift+tab twice went to %s", screenNames[h.m.active])
	}
	h.press("down", "down")
	if got := h.m.cluster.Selected(); got != "srv-03" {
		t.Errorf("down twice on the cluster selected %s", got)
	}
	h.press("4", "j", "j", "enter")
	if h.m.active != scDetail {
		t.Fatalf("enter on a job went to %s", screenNames[h.m.active])
	}
	v := h.view()
	if !strings.Contains(v, "j-000003 t5-c") {
		t.Errorf("detail of the wrong job:\n%s", v)
	}
	h.press("esc")
	if h.m.active != scJobs {
		t.Errorf("esc went to %s", screenNames[h.m.active])
	}
	h.press("6")
	if h.m.active != scEvents || !strings.Contains(h.view(), "8 of 8") {
		t.Errorf("6: on %s:\n%s", screenNames[h.m.active], h.view())
	}
	// while the filter reads text, digits and q are text, not keys
	h.press("/", "q", "1")
	if h.m.active != scEvents || h.m.events.Filter() != "q1" {
		t.Errorf("filter typing switched screens or lost text: %s %q", screenNames[h.m.active], h.m.events.Filter())
	}
	h.press("esc", "5")
	if h.m.active != scDetail {
		t.Errorf("5 went to %s", screenNames[h.m.active])
	}
}

func TestTickMovesCountdown(t *testing.T) {
	h := newHarness(t)
	h.m.width = 120
	h.m.resize()
	h.press("3")
	line := func() string {
		for _, l := range strings.Split(h.m.View().Content, "\n") {
			if strings.Contains(l, "j-000006") {
				return l
			}
		}
		return ""
	}
	if !strings.Contains(line(), "   30s") {
		t.Fatalf("before: %q", line())
	}
	// the fake answers instantly, so the poll that the tick starts resets
	// the countdown: hold the backend back by making the poll pending
	h.m.pending = 4
	h.tick(5 * time.Second)
	if !strings.Contains(line(), "   25s") {
		t.Errorf("after a 5 s tick: %q", line())
	}
}

func TestEventWithNewPlanChangesJobsView(t *testing.T) {
	h := newHarness(t)
	h.press("4")
	if !strings.Contains(h.view(), "DP2·TP1·PP1 mb64 ga1 ZeRO-1") {
		t.Fatalf("jobs view:\n%s", h.view())
	}
	h.send(data.EventsMsg{Events: []data.Event{{ID: 100, Kind: "reconfigure", JobID: "j-000004", Plan: "DP4·TP1·PP1 mb32 ga1 ZeRO-1", At: h.now}}})
	v := h.view()
	if strings.Contains(v, "DP2·TP1·PP1 mb64 ga1 ZeRO-1") || !strings.Contains(v, "DP4·TP1·PP1 mb32 ga1 ZeRO-1") {
		t.Errorf("after the event:\n%s", v)
	}
	if h.m.eventsAfter != 100 {
		t.Errorf("events resume after %d, want 100", h.m.eventsAfter)
	}
}

func TestConnectionErrorShowsBanner(t *testing.T) {
	h := newHarness(t)
	h.send(data.ConnMsg{Err: errors.New("dial unix /run/replan.sock: connect: connection refused"), Attempt: 3, RetryAt: h.now.Add(4 * time.Second)})
	v := h.view()
	if !strings.Contains(v, "connection lost (attempt 3, retry in 4s): dial unix /run/replan.sock: connect") {
		t.Fatalf("no banner:\n%s", v)
	}
	tuitest.Golden(t, "banner", v, *update)
}

// A backend that stops answering brings the banner up, polls back off, and
// the banner goes when it answers again.
func TestReconnectWithBackoff(t *testing.T) {
	h := newHarness(t)
	h.fake.Down = true
	h.tick(time.Second)
	if h.m.connErr == nil || h.m.attempt != 1 {
		t.Fatalf("after a failed poll: err %v attempt %d", h.m.connErr, h.m.attempt)
	}
	if !strings.Contains(h.view(), "connection lost") {
		t.Fatal("no banner")
	}
	// attempt n waits 1, 2, 4 … s: ticks before the retry time poll nothing
	for _, want := range []int{2, 3, 4} {
		wait := backoff(want-1, h.m.opts.MaxBackoff)
		h.tick(wait - 500*time.Millisecond)
		if h.m.attempt != want-1 {
			t.Fatalf("polled before the backoff of attempt %d ran out", want-1)
		}
		h.tick(500 * time.Millisecond)
		if h.m.attempt != want {
			t.Fatalf("attempt %d: got %d", want, h.m.attempt)
		}
	}
	h.fake.Down = false
	h.tick(backoff(4, h.m.opts.MaxBackoff))
	if h.m.connErr != nil || strings.Contains(h.view(), "connection lost") {
		t.Errorf("still down after the backend came back: %v", h.m.connErr)
	}
}

func TestActions(t *testing.T) {
	h := newHarness(t)
	h.press("4", "c")
	if !strings.Contains(h.view(), "cancel job j-000001? y to confirm") {
		t.Fatalf("no confirmation:\n%s", h.view())
	}
	h.press("n")
	h.press("c", "y")
	h.press("2", "j", "j", "j", "d", "y", "u", "y")
	h.press("3", "h", "y", "H", "y")
	spec := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(spec, []byte("name: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.press("s")
	for _, r := range spec {
		h.press(string(r))
	}
	h.press("enter")
	if !strings.Contains(h.view(), "submitted "+spec+" as j-000099") {
		t.Errorf("no submit result:\n%s", h.view())
	}
	h.press("+", "+", "-")
	want := []string{"speed 1", "cancel j-000001", "drain srv-04", "undrain srv-04", "hold j-000006", "release j-000006", "submit job.yaml", "speed 2", "speed 2", "speed 0.5"}
	if !slices.Equal(h.fake.Ops, want) {
		t.Errorf("ops %q, want %q", h.fake.Ops, want)
	}
	if !strings.Contains(h.view(), "×2") {
		t.Errorf("speed not shown:\n%s", h.view())
	}
}

func TestQuit(t *testing.T) {
	h := newHarness(t)
	for _, k := range []string{"q", "ctrl+c"} {
		_, cmd := h.m.Update(tuitest.Key(k))
		if cmd == nil {
			t.Fatalf("%s: no command", k)
		}
		if _, ok := cmd().(tea.QuitMsg); !ok {
			t.Errorf("%s does not quit", k)
		}
	}
}

// Every screen renders at any size, tiny ones included, without panicking
// and within its bounds.
func TestAllScreensAnySize(t *testing.T) {
	h := newHarness(t)
	h.press("4", "enter") // load a detail
	for _, sz := range [][2]int{{0, 0}, {1, 1}, {20, 5}, {40, 10}, {80, 24}, {200, 60}} {
		h.send(tea.WindowSizeMsg{Width: sz[0], Height: sz[1]})
		for _, k := range []string{"1", "2", "3", "4", "5", "6", "7", "8", "?"} {
			h.press(k)
			for _, mv := range []string{"j", "end", "pgdown", "k", "home"} {
				h.press(mv)
			}
			v := h.m.View().Content
			if sz[0] >= 20 {
				tuitest.CheckSize(t, v, sz[0], max(sz[1], 3))
			}
			if k == "?" {
				h.press("x")
			}
		}
	}
}

// TestSortKeysOnEveryList: o/O sort the cluster, queue, jobs and history
// (the header marks the column), the help page lists them on those
// screens only, wrapped rather than cut at 80 columns, and o does nothing
// where it is not listed.
func TestSortKeysOnEveryList(t *testing.T) {
	h := newHarness(t)
	h.press("8")
	rows := func() []string {
		var ids []string
		for _, l := range strings.Split(h.view(), "\n") {
			if f := strings.Fields(strings.TrimPrefix(l, "▸")); len(f) > 0 && strings.HasPrefix(f[0], "j-0000") {
				ids = append(ids, f[0])
			}
		}
		return ids
	}
	if got := rows(); !slices.Equal(got, []string{"j-000010", "j-000009"}) || !strings.Contains(h.view(), "ENDED▼") {
		t.Errorf("history newest first: %v\n%s", got, h.view())
	}
	h.press("o") // by ID
	if got := rows(); !slices.Equal(got, []string{"j-000009", "j-000010"}) || !strings.Contains(h.view(), "ID▲") || !strings.Contains(h.view(), "by ID ▲") {
		t.Errorf("history by ID: %v\n%s", got, h.view())
	}
	h.press("O")
	if got := rows(); !slices.Equal(got, []string{"j-000010", "j-000009"}) || !strings.Contains(h.view(), "ID▼") {
		t.Errorf("history by ID reversed: %v\n%s", got, h.view())
	}

	h.press("?")
	help := h.view()
	h.press("x")
	sortOn := map[string]bool{}
	screen := ""
	lines := strings.Split(help, "\n")
	for _, l := range lines[:len(lines)-1] { // the footer is cut where narrow
		if strings.HasPrefix(l, "On ") {
			screen = strings.TrimSuffix(strings.Fields(l)[1], ":")
		}
		if screen != "" && strings.Contains(l, "o/O sort column, reverse") {
			sortOn[screen] = true
		}
		if strings.HasSuffix(l, "…") {
			t.Errorf("help line cut: %q", l)
		}
	}
	for _, s := range screenNames {
		want := s == "cluster" || s == "queue" || s == "jobs" || s == "history"
		if sortOn[s] != want {
			t.Errorf("help lists o/O on %s: %v, want %v\n%s", s, sortOn[s], want, help)
		}
	}
	for _, k := range []string{"1", "6", "7"} { // overview, events, links: o is not theirs
		h.press(k)
		before := h.view()
		h.press("o", "O")
		if after := h.view(); after != before {
			t.Errorf("o/O changed screen %s:\n%s\nvs\n%s", k, before, after)
		}
	}
}

// openDetail opens j-000003's detail (the third running job).
func (h *harness) openDetail() {
	h.press("4", "j", "j", "enter")
	if h.m.active != scDetail || h.m.detail.JobID() != "j-000003" {
		h.t.Fatalf("on %s with job %q", screenNames[h.m.active], h.m.detail.JobID())
	}
}

// TestDetailListsAttemptsAndSpec: the detail lists the job's launches
// with their GPUs, plan and how each ended; v shows the spec as the
// backend gives it (env values redacted) and v or esc goes back.
func TestDetailListsAttemptsAndSpec(t *testing.T) {
	h := newHarness(t)
	h.send(tea.WindowSizeMsg{Width: 160, Height: 48})
	h.openDetail()
	v := h.view()
	for _, want := range []string{"Attempts", "#1  11-22 15:06:00 → 11-22 15:07:00   8 GPUs DP4·TP2·PP1 mb2 ga4 ZeRO-1 on 1 server × 8 GPUs · reconfigured: grown from 8 to 16 GPUs",
		"#2  11-22 15:07:00 → now             16 GPUs DP8·TP2·PP1 mb2 ga2 ZeRO-1 on 2 servers × 8 GPUs · running"} {
		if !strings.Contains(v, want) {
			t.Errorf("detail lacks %q:\n%s", want, v)
		}
	}
	for _, back := range []string{"v", "esc"} {
		h.press("v")
		v = h.view()
		if !strings.Contains(v, "j-000003 t5-c · spec") || !strings.Contains(v, `"WANDB_API_KEY": "<redacted>"`) || strings.Contains(v, "Attempts") {
			t.Errorf("v shows no spec:\n%s", v)
		}
		h.press(back)
		if v = h.view(); !strings.Contains(v, "Attempts") || h.m.active != scDetail {
			t.Errorf("%s did not go back to the detail (on %s):\n%s", back, screenNames[h.m.active], v)
		}
	}
	h.press("esc") // from the detail: back to the jobs
	if h.m.active != scJobs {
		t.Errorf("esc went to %s", screenNames[h.m.active])
	}
}

// TestDetailLogPane: l opens the job's log at its end; the pane scrolls
// with pgup/home/end, follows new lines at its end and stays put when
// scrolled up.
func TestDetailLogPane(t *testing.T) {
	h := newHarness(t)
	h.openDetail()
	h.press("l")
	v := h.view()
	if !strings.Contains(v, "log (rank 0, newest attempt, last 40 lines)") || !strings.Contains(v, "iter 400 loss 2.050") || strings.Contains(v, "iter 10 loss") {
		t.Fatalf("the log pane does not open at the end:\n%s", v)
	}
	h.press("home")
	if v = h.view(); !strings.Contains(v, "iter 10 loss 4.000") || strings.Contains(v, "iter 400 loss") {
		t.Errorf("home does not go to the first line:\n%s", v)
	}
	h.press("j")
	if v = h.view(); strings.Contains(v, "iter 10 loss 4.000") || !strings.Contains(v, "iter 20 loss 3.950") {
		t.Errorf("j did not scroll one line:\n%s", v)
	}
	// new lines while scrolled up: the pane stays where it is
	h.fake.Snap.Details["j-000003"] = withLog(h.fake.Snap.Details["j-000003"], "iter 410 loss 2.000")
	h.tick(2 * time.Second)
	if v = h.view(); strings.Contains(v, "iter 410") || !strings.Contains(v, "iter 20 loss 3.950") {
		t.Errorf("a refresh moved the scrolled-up pane:\n%s", v)
	}
	// at the end it follows
	h.press("end")
	h.fake.Snap.Details["j-000003"] = withLog(h.fake.Snap.Details["j-000003"], "iter 420 loss 1.950")
	h.tick(2 * time.Second)
	if v = h.view(); !strings.Contains(v, "iter 420 loss 1.950") || !strings.Contains(v, "last 42 lines") {
		t.Errorf("the pane does not follow new lines:\n%s", v)
	}
	h.press("pgup")
	if v = h.view(); strings.Contains(v, "iter 420 loss") {
		t.Errorf("pgup did not scroll:\n%s", v)
	}
	h.press("l")
	if v = h.view(); !strings.Contains(v, "(v spec · l log)") || strings.Contains(v, "· log (rank 0") {
		t.Errorf("l does not go back to the detail:\n%s", v)
	}
}

func withLog(d data.JobDetail, line string) data.JobDetail {
	d.Log = append(slices.Clone(d.Log), line)
	return d
}

// TestDetailSparklines: the detail draws the job's measured throughput
// and its GPUs' utilisation over the last hour from the polls, and
// forgets what is older.
func TestDetailSparklines(t *testing.T) {
	h := newHarness(t)
	h.send(tea.WindowSizeMsg{Width: 160, Height: 48})
	h.openDetail()
	// the first poll saw 14.2 samples/s; then one every 5 minutes, the
	// throughput rising from 1
	for i := range 11 {
		h.fake.Snap.Jobs[2].MeasuredSPS = float64(1 + 2*i)
		h.tick(5 * time.Minute)
	}
	h.fake.Snap.Jobs[2].MeasuredSPS = 24
	h.tick(5 * time.Minute)
	v := h.view()
	line := func(prefix string) string {
		for _, l := range strings.Split(v, "\n") {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		t.Fatalf("no %q line:\n%s", prefix, v)
		return ""
	}
	sps := line("samples/s  ")
	if !strings.Contains(sps, "now 24.0 (top 24.0)") || !strings.Contains(sps, "█") || !strings.Contains(sps, "▁") {
		t.Errorf("throughput sparkline: %q", sps)
	}
	if strings.Index(sps, "▁") > strings.Index(sps, "█") {
		t.Errorf("a rising throughput does not rise: %q", sps)
	}
	if u := line("GPU util   "); !strings.Contains(u, "now 92.0%") {
		t.Errorf("utilisation sparkline: %q", u)
	}
	if !strings.Contains(v, "Last hour (kept from the polls since this TUI started: 1h00m)") {
		t.Errorf("span:\n%s", v)
	}
	h.tick(7 * time.Minute) // the first poll is now over an hour old, and gone
	v = h.view()
	if !strings.Contains(v, "started: 57m00s)") {
		t.Errorf("samples older than an hour stay:\n%s", v)
	}
}

// TestDetailListsGPUProcesses: the detail lists each GPU the job holds
// with its figures and the processes on it (PID, GPU memory), as the
// servers were last polled.
func TestDetailListsGPUProcesses(t *testing.T) {
	h := newHarness(t)
	h.send(tea.WindowSizeMsg{Width: 160, Height: 100}) // all of the detail
	h.openDetail()
	var lines []string
	for _, l := range strings.Split(h.view(), "\n") {
		if strings.HasPrefix(l, "srv-") && strings.Contains(l, " GPU ") {
			lines = append(lines, strings.TrimRight(l, " "))
		}
	}
	if len(lines) != 16 {
		t.Fatalf("%d GPU lines, want 16 (srv-03 and srv-05 × 8):\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, want := range []string{"srv-03 GPU 0   92%   61.0/80 GiB   71°C  360W  pid 3000 60.5 GiB  pid 3099 0.5 GiB", "srv-05 GPU 7   92%   61.0/80 GiB   71°C  360W  pid 5007 60.5 GiB"} {
		if !slices.Contains(lines, want) {
			t.Errorf("no line %q in:\n%s", want, strings.Join(lines, "\n"))
		}
	}
}

// The title's counts are the jobs the screens list. The daemon's status
// counts every live job but its last round's waiting only the jobs the
// policy considered: an unschedulable or held job counted as running
// ("2 running · 0 waiting" with one running and one unschedulable).
func TestTitleCountsWhatTheScreensList(t *testing.T) {
	h := newHarness(t)
	h.fake.Snap.Status.Jobs, h.fake.Snap.Status.Waiting = 9, 1 // a round that skipped two of the queue's three
	h.tick(time.Second)
	h.send(tea.WindowSizeMsg{Width: 160, Height: 48})
	title := strings.SplitN(h.view(), "\n", 2)[0]
	want := fmt.Sprintf("%d running · %d waiting", len(h.fake.Snap.Jobs), len(h.fake.Snap.Queue))
	if !strings.Contains(title, want) {
		t.Errorf("title %q, want %q", title, want)
	}
}
