package agent

import (
	"bufio"
	"io"
	"os"
	"strings"
	"time"

	"github.com/replan/replan/agent/logparse"
)

// tailState is where a log tailer stands in the current log file.
type tailState struct {
	off     int64  // bytes of the current file consumed
	partial []byte // unterminated last line
	skip    bool   // inside an overlong line: drop up to its newline
}

// maxLogLine is the longest log line parsed; longer ones are skipped.
const maxLogLine = 64 << 10

// tail follows the process's log, parses throughput samples and rotates the
// file by size, until the process has exited (and its log is drained) or
// the supervisor closes.
func (p *proc) tail() {
	defer p.s.wg.Done()
	t := time.NewTicker(p.s.cfg.PollInterval)
	defer t.Stop()
	var st tailState
	for {
		exited := false
		select {
		case <-p.done:
			exited = true
		default:
		}
		p.readLog(p.info.LogPath, &st)
		if exited {
			return
		}
		select {
		case <-p.s.ctx.Done():
			return
		case <-p.done:
		case <-t.C:
		}
	}
}

// readLog parses the log's new bytes and rotates it when too big.
func (p *proc) readLog(path string, st *tailState) {
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	if fi.Size() < st.off { // truncated behind our back
		*st = tailState{}
	}
	if fi.Size() > st.off {
		f, err := os.Open(path)
		if err != nil {
			return
		}
		st.off += p.parseLines(&offsetReader{f, st.off}, st)
		f.Close()
	}
	if fi.Size() >= p.s.cfg.LogMaxBytes {
		copied, err := rotateCopyTruncate(path, p.s.cfg.LogKeep)
		if err != nil {
			p.s.log.Warn("rotate log", "id", p.info.Spec.ID, "err", err)
			return
		}
		// Lines written between our read and the copy are in the copy.
		if copied > st.off {
			if f, err := os.Open(path + ".1"); err == nil {
				p.parseLines(io.LimitReader(&offsetReader{f, st.off}, copied-st.off), st)
				f.Close()
			}
		}
		st.off = 0
	}
}

type offsetReader struct {
	f   *os.File
	off int64
}

func (r *offsetReader) Read(b []byte) (int, error) {
	n, err := r.f.ReadAt(b, r.off)
	r.off += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// parseLines reads r to EOF, parsing complete lines into samples and keeping
// an unterminated last line in st.partial; it returns the bytes read.
func (p *proc) parseLines(r io.Reader, st *tailState) int64 {
	br := bufio.NewReaderSize(r, maxLogLine)
	var n int64
	for {
		line, err := br.ReadSlice('\n')
		n += int64(len(line))
		if err == bufio.ErrBufferFull || len(st.partial)+len(line) > maxLogLine {
			st.partial, st.skip = nil, true
			if err == nil { // the overlong line ended here
				st.skip = false
			}
			continue
		}
		if err != nil { // EOF: keep the unterminated rest for next time
			if !st.skip {
				st.partial = append(st.partial, line...)
			}
			return n
		}
		if st.skip {
			st.skip = false
			continue
		}
		full := string(append(st.partial, line...))
		st.partial = nil
		if s, ok := logparse.ParseLine(strings.TrimRight(full, "\r\n"), p.s.clock.Now()); ok {
			p.mu.Lock()
			p.samples = append(p.samples, s)
			if over := len(p.samples) - p.s.cfg.MaxSamples; over > 0 {
				p.samples = append([]logparse.Sample{}, p.samples[over:]...)
			}
			p.mu.Unlock()
		}
	}
}
