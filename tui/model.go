package tui

import (
	"context"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/replan/replan/tui/cluster"
	"github.com/replan/replan/tui/common"
	"github.com/replan/replan/tui/data"
	"github.com/replan/replan/tui/events"
	"github.com/replan/replan/tui/history"
	"github.com/replan/replan/tui/jobdetail"
	"github.com/replan/replan/tui/jobs"
	"github.com/replan/replan/tui/links"
	"github.com/replan/replan/tui/overview"
	"github.com/replan/replan/tui/queue"
)

// screen numbers the tabs, in the order of the 1-6 keys.
type screen int

const (
	scOverview screen = iota
	scCluster
	scQueue
	scJobs
	scDetail
	scEvents
	scLinks
	scHistory
	numScreens
)

var screenNames = [numScreens]string{"overview", "cluster", "queue", "jobs", "detail", "events", "links", "history"}

// prompt is what the footer is asking for, if anything.
type prompt int

const (
	promptNone prompt = iota
	promptConfirm
	promptSubmit
)

// model is the root: it routes. It owns the size, which screen has focus,
// the global keys, the connection banner and the footer's prompts; the
// screens own everything they show.
type model struct {
	b    Backend
	call caller
	opts Options
	st   common.Styles
	keys common.Keys

	screens  [numScreens]common.Screen
	overview *overview.Model
	cluster  *cluster.Model
	queue    *queue.Model
	jobs     *jobs.Model
	detail   *jobdetail.Model
	events   *events.Model
	links    *links.Model
	history  *history.Model

	active, prev  screen
	width, height int
	now           time.Time
	status        data.Status
	haveStatus    bool
	replay        data.Replay
	haveReplay    bool

	// polling and the connection
	pending        int
	roundErr       error
	nextPoll       time.Time
	connErr        error
	attempt        int
	retryAt        time.Time
	eventsAfter    int64
	eventsInFlight bool
	eventsRetry    time.Time
	eventsAttempt  int

	prompt     prompt
	confirm    data.ActionMsg
	input      common.Input
	flash      string
	flashBad   bool
	flashUntil time.Time
	help       bool
	speed      float64

	// the backend's clock: its Now at the last status poll, the real time
	// of that poll, and how fast it runs (backend seconds per second)
	backendNow, backendAt time.Time
	rate                  float64

	tick  func() tea.Cmd   // the one-second clock; tests stop it
	clock func() time.Time // stamps polled data; tests fix it
}

func newModel(ctx context.Context, b Backend, opts Options) *model {
	opts = opts.withDefaults()
	st, keys, pal := common.NewStyles(opts.Profile), common.DefaultKeys(), common.NewPalette()
	m := &model{b: b, call: newCaller(ctx), opts: opts, st: st, keys: keys, width: 80, height: 24, tick: tick, clock: time.Now}
	m.cluster = cluster.New(st, keys, pal)
	m.overview = overview.New(st, pal)
	m.queue = queue.New(st, keys)
	m.jobs = jobs.New(st, keys, pal)
	m.detail = jobdetail.New(st, keys)
	m.events = events.New(st, keys)
	m.links = links.New(st, keys)
	m.history = history.New(st, keys)
	m.screens = [numScreens]common.Screen{m.overview, m.cluster, m.queue, m.jobs, m.detail, m.events, m.links, m.history}
	m.input.Prompt = "spec file: "
	m.now = m.clock()
	m.resize()
	return m
}

// Init starts the clock, the first poll and the event stream, and asks a
// Speeder for its speed (a factor of 1 changes nothing).
func (m *model) Init() tea.Cmd {
	return tea.Batch(m.tick(), m.pollRound(), m.pollLinks(), m.pollReplay(), m.pollEvents(), m.setSpeed(1))
}

func (m *model) contentHeight() int {
	h := m.height - 2 // title bar and footer
	if m.connErr != nil {
		h-- // banner
	}
	return max(1, h)
}

func (m *model) resize() {
	for _, s := range m.screens {
		s.SetSize(m.width, m.contentHeight())
	}
}

// Update routes a message.
func (m *model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.resize()
		return m, nil
	case tea.KeyPressMsg:
		return m, m.key(msg)
	case tea.PasteMsg:
		if m.prompt == promptSubmit {
			m.input.SetValue(m.input.Value() + strings.TrimSpace(msg.Content))
			return m, nil
		}
		return m, m.screens[m.active].Update(msg)
	case data.TickMsg:
		return m, m.onTick(msg)
	case data.StatusMsg:
		if msg.Err == nil {
			m.status, m.haveStatus = msg.Status, true
			m.observeClock(msg.Status.Now, msg.At)
		}
		return m, m.roundPart(msg.Err)
	case data.NodesMsg:
		return m, tea.Batch(m.broadcast(msg), m.roundPart(msg.Err))
	case data.QueueMsg:
		return m, tea.Batch(m.broadcast(msg), m.roundPart(msg.Err))
	case data.JobsMsg:
		return m, tea.Batch(m.broadcast(msg), m.roundPart(msg.Err))
	case data.EventsMsg:
		m.eventsInFlight = false
		if msg.Err != nil {
			m.eventsAttempt++
			m.eventsRetry = m.now.Add(backoff(m.eventsAttempt, m.opts.MaxBackoff))
			return m, nil
		}
		m.eventsAttempt = 0
		n := len(msg.Events)
		if n == 0 {
			// the wait ran out: the next tick asks again
			return m, nil
		}
		m.eventsAfter = msg.Events[n-1].ID
		return m, tea.Batch(m.broadcast(msg), m.pollEvents())
	case data.ReplayMsg:
		if msg.Err == nil {
			if msg.Replay.Done && !m.replay.Done {
				m.setFlash(fmt.Sprintf("the trace has ended: all %d jobs are done; q prints the summary", msg.Replay.Total), false)
			}
			m.replay, m.haveReplay = msg.Replay, true
		}
		return m, nil
	case data.ConnMsg:
		m.setConn(msg.Err, msg.Attempt, msg.RetryAt)
		return m, nil
	case data.JobDetailMsg:
		if msg.Err != nil {
			m.setFlash(fmt.Sprintf("job %s: %v", msg.Detail.Job.ID, msg.Err), true)
			return m, nil
		}
		return m, m.broadcast(msg)
	case data.OpenJobMsg:
		if m.active != scDetail {
			m.prev = m.active
		}
		m.active = scDetail
		return m, m.fetchJob(msg.ID)
	case data.BackMsg:
		m.active = m.prev
		if m.active == scDetail {
			m.active = scJobs
		}
		return m, nil
	case data.ActionMsg:
		m.prompt, m.confirm = promptConfirm, msg
		return m, nil
	case data.ResultMsg:
		if msg.Err != nil {
			m.setFlash(msg.Err.Error(), true)
		} else {
			m.setFlash(msg.Text, false)
		}
		m.nextPoll = m.now // show the effect at once
		return m, nil
	case submitMsg:
		if msg.err != nil {
			m.setFlash(fmt.Sprintf("submit %s: %s", msg.file, oneLine(msg.err.Error())), true)
		} else {
			m.setFlash(fmt.Sprintf("submitted %s as %s", msg.file, msg.id), false)
		}
		m.nextPoll = m.now
		return m, nil
	case speedMsg:
		if msg.err != nil {
			m.setFlash("speed: "+msg.err.Error(), true)
		} else {
			m.speed = msg.speed
		}
		return m, nil
	}
	return m, m.broadcast(msg)
}

// broadcast hands a data message to every screen (each takes what it
// reads); keys go to the active screen only.
func (m *model) broadcast(msg tea.Msg) tea.Cmd {
	var cmds []tea.Cmd
	for _, s := range m.screens {
		if c := s.Update(msg); c != nil {
			cmds = append(cmds, c)
		}
	}
	return tea.Batch(cmds...)
}

// observeClock learns how fast the backend's clock runs from two polls
// at least a second apart.
func (m *model) observeClock(backend, at time.Time) {
	if backend.IsZero() || at.IsZero() {
		return
	}
	if !m.backendNow.IsZero() {
		dr, db := at.Sub(m.backendAt), backend.Sub(m.backendNow)
		if dr < time.Second {
			return
		}
		if db >= 0 {
			m.rate = float64(db) / float64(dr)
		}
	}
	m.backendNow, m.backendAt = backend, at
}

// clockRate is the backend's seconds per real second: measured, else the
// speed a Speeder reported, else 1.
func (m *model) clockRate() float64 {
	switch {
	case m.rate > 0:
		return m.rate
	case m.speed > 0:
		return m.speed
	}
	return 1
}

func (m *model) onTick(t data.TickMsg) tea.Cmd {
	t.Rate = m.clockRate()
	m.now = t.Now
	cmds := []tea.Cmd{m.tick(), m.broadcast(t)}
	if m.flash != "" && !m.now.Before(m.flashUntil) {
		m.flash = ""
	}
	if m.pending == 0 && !m.now.Before(m.nextPoll) {
		cmds = append(cmds, m.pollRound(), m.pollLinks(), m.pollReplay())
		if m.active == scHistory {
			cmds = append(cmds, m.pollHistory()) // only while it is shown
		}
		m.nextPoll = m.now.Add(m.opts.PollEvery)
		if id := m.detail.JobID(); id != "" && m.active == scDetail {
			cmds = append(cmds, m.fetchJob(id))
		}
	}
	if !m.eventsInFlight && !m.now.Before(m.eventsRetry) {
		cmds = append(cmds, m.pollEvents())
	}
	return tea.Batch(cmds...)
}

// roundPart counts one answer of a poll round; the last one decides
// whether the connection is up and when the next round is due.
func (m *model) roundPart(err error) tea.Cmd {
	if err != nil && m.roundErr == nil {
		m.roundErr = err
	}
	if m.pending > 0 {
		m.pending--
	}
	if m.pending > 0 {
		return nil
	}
	if m.roundErr != nil {
		n := m.attempt + 1
		m.setConn(m.roundErr, n, m.now.Add(backoff(n, m.opts.MaxBackoff)))
		m.nextPoll = m.retryAt
		return nil
	}
	m.setConn(nil, 0, time.Time{})
	return nil
}

func (m *model) setConn(err error, attempt int, retryAt time.Time) {
	was := m.connErr != nil
	m.connErr, m.attempt, m.retryAt = err, attempt, retryAt
	if was != (err != nil) {
		m.resize()
	}
}

func (m *model) setFlash(s string, bad bool) {
	m.flash, m.flashBad, m.flashUntil = s, bad, m.now.Add(6*time.Second)
}

func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

func (m *model) key(k tea.KeyPressMsg) tea.Cmd {
	if k.String() == "ctrl+c" {
		return tea.Quit
	}
	switch m.prompt {
	case promptConfirm:
		m.prompt = promptNone
		if k.String() == "y" || k.String() == "Y" {
			return m.runAction(m.confirm)
		}
		m.setFlash("not done", false)
		return nil
	case promptSubmit:
		switch k.String() {
		case "esc":
			m.prompt = promptNone
		case "enter":
			m.prompt = promptNone
			if p := strings.TrimSpace(m.input.Value()); p != "" {
				return m.submit(p)
			}
		default:
			m.input.Update(k)
		}
		return nil
	}
	if m.help {
		// Any key closes the help page; `?` and esc only close it, every
		// other key also does what it does (2 opens the cluster, q quits).
		m.help = false
		if key.Matches(k, m.keys.Help) || k.String() == "esc" {
			return nil
		}
	}
	scr := m.screens[m.active]
	if scr.Capturing() {
		return scr.Update(k)
	}
	switch {
	case key.Matches(k, m.keys.Quit):
		return tea.Quit
	case key.Matches(k, m.keys.Help):
		m.help = true
	case key.Matches(k, m.keys.NextTab):
		m.switchTo((m.active + 1) % numScreens)
	case key.Matches(k, m.keys.PrevTab):
		m.switchTo((m.active + numScreens - 1) % numScreens)
	case key.Matches(k, m.keys.Tab1):
		m.switchTo(scOverview)
	case key.Matches(k, m.keys.Tab2):
		m.switchTo(scCluster)
	case key.Matches(k, m.keys.Tab3):
		m.switchTo(scQueue)
	case key.Matches(k, m.keys.Tab4):
		m.switchTo(scJobs)
	case key.Matches(k, m.keys.Tab5):
		return m.openDetail()
	case key.Matches(k, m.keys.Tab6):
		m.switchTo(scEvents)
	case key.Matches(k, m.keys.Tab7):
		m.switchTo(scLinks)
	case key.Matches(k, m.keys.Tab8):
		m.switchTo(scHistory)
		return m.pollHistory()
	case key.Matches(k, m.keys.Submit):
		m.prompt = promptSubmit
		m.input.SetValue("")
	case key.Matches(k, m.keys.Faster):
		return m.setSpeed(2)
	case key.Matches(k, m.keys.Slower):
		return m.setSpeed(0.5)
	default:
		return scr.Update(k)
	}
	return nil
}

func (m *model) switchTo(s screen) {
	if s == scDetail {
		m.prev = m.active
	}
	m.active = s
}

// openDetail shows the detail of the job selected on the jobs (or queue)
// screen when none is shown yet.
func (m *model) openDetail() tea.Cmd {
	m.switchTo(scDetail)
	if m.detail.JobID() != "" {
		return m.fetchJob(m.detail.JobID())
	}
	id := m.jobs.Selected()
	if id == "" {
		id = m.queue.Selected()
	}
	if id == "" {
		return nil
	}
	return m.fetchJob(id)
}

// View draws the title bar, the banner, the active screen and the footer.
func (m *model) View() tea.View {
	v := tea.NewView(m.render())
	v.AltScreen = !m.opts.NoAltScreen
	v.WindowTitle = m.opts.Title
	return v
}

func (m *model) render() string {
	lines := make([]string, 0, m.height)
	lines = append(lines, m.titleBar())
	if m.connErr != nil {
		lines = append(lines, m.banner())
	}
	if m.help {
		lines = append(lines, m.helpPage())
	} else {
		lines = append(lines, m.screens[m.active].View())
	}
	lines = append(lines, m.footer())
	return strings.Join(lines, "\n")
}

func (m *model) titleBar() string {
	var b strings.Builder
	// narrow terminals name only the active screen: the status needs room
	short := m.width < 150
	for i, n := range screenNames {
		t := fmt.Sprintf(" %d %s ", i+1, n)
		if short && (screen(i) != m.active || m.help) {
			t = fmt.Sprintf(" %d ", i+1)
		}
		if screen(i) == m.active && !m.help {
			b.WriteString(m.st.TabActive.Render(t))
		} else {
			b.WriteString(m.st.TabInactive.Render(t))
		}
	}
	// the right side drops its least useful parts (first ones) when narrow:
	// the title, the policy, the speed, the trace's progress, then the
	// counts; the simulated clock stays
	parts := []string{m.opts.Title}
	if m.haveStatus && m.status.Policy != "" {
		parts = append(parts, "policy "+m.status.Policy)
	}
	if m.haveStatus && m.status.Members > 1 {
		parts = append(parts, haPart(m.status))
	}
	if m.speed > 0 {
		parts = append(parts, fmt.Sprintf("×%g", m.speed))
	}
	if m.haveReplay {
		r := m.replay
		if r.Done {
			parts = append(parts, fmt.Sprintf("trace ended (%d jobs)", r.Total))
		} else {
			parts = append(parts, fmt.Sprintf("trace %d/%d in, %d done", r.Submitted, r.Total, r.Ended))
		}
	}
	if m.haveStatus {
		s := m.status
		// what the screens list: the status's last round counts only the
		// jobs its policy considered (not held or unschedulable ones)
		running, waiting := max(s.Jobs-s.Waiting, 0), s.Waiting
		if r, w, ok := m.overview.Counts(); ok {
			running, waiting = r, w
		}
		parts = append(parts, fmt.Sprintf("%d running · %d waiting · %d/%d GPUs free", running, waiting, s.FreeGPUs, s.GPUs))
	}
	if m.haveReplay {
		parts = append(parts, m.replay.Clock.Format("Mon 15:04:05"))
	}
	left := b.String()
	room := m.width - ansi.StringWidth(left) - 1
	for len(parts) > 1 && ansi.StringWidth(strings.Join(parts, " · ")) > room {
		parts = parts[1:]
	}
	right := strings.Join(parts, " · ")
	if room < 8 {
		return common.Truncate(left, m.width)
	}
	right = common.Truncate(right, room)
	return left + strings.Repeat(" ", m.width-ansi.StringWidth(left)-ansi.StringWidth(right)) + m.st.Title.Render(right)
}

// haPart is the title bar's word on a highly available control plane:
// the leader, the members and the leader's epoch (and whether the daemon
// the TUI reads is a follower).
func haPart(s data.Status) string {
	leader := s.Leader
	if leader == "" {
		leader = "none"
	}
	out := fmt.Sprintf("leader %s (%d members, epoch %d)", leader, s.Members, s.Epoch)
	if s.Role == "follower" {
		out = "via a follower · " + out
	}
	return out
}

func (m *model) banner() string {
	s := " connection lost"
	if m.attempt > 0 {
		s += fmt.Sprintf(" (attempt %d", m.attempt)
		if wait := m.retryAt.Sub(m.now); !m.retryAt.IsZero() && wait > 0 {
			s += fmt.Sprintf(", retry in %s", common.Duration(wait.Round(time.Second)))
		}
		s += ")"
	}
	s += ": " + oneLine(m.connErr.Error())
	return m.st.Banner.Render(common.Pad(s, m.width))
}

func (m *model) footer() string {
	switch m.prompt {
	case promptConfirm:
		return m.st.Warn.Render(common.Truncate(fmt.Sprintf("%s %s? y to confirm, any other key to keep it", m.confirm.Action, m.confirm.Target), m.width))
	case promptSubmit:
		return m.input.View(m.width)
	}
	if m.flash != "" {
		if m.flashBad {
			return m.st.Bad.Render(common.Truncate(m.flash, m.width))
		}
		return m.st.OK.Render(common.Truncate(m.flash, m.width))
	}
	var parts []string
	if len(m.screens[m.active].Help()) > len(m.ownKeys(m.screens[m.active])) {
		parts = append(parts, m.st.Key.Render("↑↓/jk")+" move") // only on screens with a cursor
	}
	for _, b := range m.ownKeys(m.screens[m.active]) {
		parts = append(parts, m.st.Key.Render(b.Help().Key)+" "+b.Help().Desc)
	}
	parts = append(parts, m.st.Key.Render("tab/1-8")+" screens", m.st.Key.Render("?")+" help", m.st.Key.Render("q")+" quit")
	return m.st.Footer.Render(common.Truncate(strings.Join(parts, "  "), m.width))
}

// ownKeys are a screen's keys other than the cursor moves every list has.
func (m *model) ownKeys(s common.Screen) []key.Binding {
	moves := map[string]bool{}
	for _, b := range m.keys.Moves() {
		moves[b.Help().Key] = true
	}
	var out []key.Binding
	for _, b := range s.Help() {
		if !moves[b.Help().Key] {
			out = append(out, b)
		}
	}
	return out
}

// helpPage lists every key: the global ones (in as many columns of 26
// cells as fit, at most 3) and each screen's, wrapped so that none is cut.
func (m *model) helpPage() string {
	k := m.keys
	const colW = 26
	cols := common.Clamp((m.width-2)/colW, 1, 3)
	cell := func(b key.Binding) string {
		return m.st.Key.Render(common.Pad(b.Help().Key, 9)) + " " + b.Help().Desc
	}
	lines := []string{m.st.Header.Render("Keys everywhere")}
	global := append([]key.Binding{k.NextTab, k.PrevTab, k.Tab1, k.Tab2, k.Tab3, k.Tab4, k.Tab5, k.Tab6, k.Tab7, k.Tab8, k.Submit}, k.Help, k.Quit)
	if _, ok := m.b.(Speeder); ok {
		global = append(global, k.Faster, k.Slower) // only where they do something
	}
	global = append(global, k.Moves()...)
	for i := 0; i < len(global); i += cols {
		l := " "
		for c := i; c < min(i+cols, len(global)); c++ {
			l += " " + common.Pad(cell(global[c]), colW-1)
		}
		lines = append(lines, strings.TrimRight(l, " "))
	}
	const indent = 12
	for i, s := range m.screens {
		l := m.st.Header.Render(common.Pad("On "+screenNames[i]+":", indent))
		w := indent
		for j, b := range m.ownKeys(s) {
			d := m.st.Key.Render(b.Help().Key) + " " + b.Help().Desc
			dw := len([]rune(b.Help().Key)) + 1 + len([]rune(b.Help().Desc))
			sep := ""
			if j > 0 {
				sep = " · "
			}
			if j > 0 && w+len([]rune(sep))+dw > m.width {
				lines = append(lines, l)
				l, w, sep = strings.Repeat(" ", indent), indent, ""
			}
			l += sep + d
			w += len([]rune(sep)) + dw
		}
		lines = append(lines, l)
	}
	lines = append(lines, "", m.st.Faint.Render("Filters: / then type; enter keeps it, esc clears it. Any key closes this page."))
	for i := range lines {
		lines[i] = common.Truncate(lines[i], m.width)
	}
	return common.FitLines(lines, m.contentHeight())
}
