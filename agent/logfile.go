package agent

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// rotateCopyTruncate rotates path the way logrotate's copytruncate does:
// path.(keep-1) → path.keep, …, path → path.1 (copied), then path is
// truncated. The process keeps writing to the same O_APPEND descriptor, so
// rotation works even for processes the agent did not start (re-adopted) and
// keeps working while the agent is down. It returns the copied bytes' length.
func rotateCopyTruncate(path string, keep int) (int64, error) {
	if keep < 1 {
		keep = 1
	}
	_ = os.Remove(fmt.Sprintf("%s.%d", path, keep))
	for i := keep - 1; i >= 1; i-- {
		_ = os.Rename(fmt.Sprintf("%s.%d", path, i), fmt.Sprintf("%s.%d", path, i+1))
	}
	src, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	dst, err := os.OpenFile(path+".1", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("rotate %s: %w", path, err)
	}
	if err := src.Truncate(0); err != nil {
		return n, fmt.Errorf("rotate %s: truncate: %w", path, err)
	}
	return n, nil
}

// tailLines returns up to the last n lines of path, looking into path.1 when
// path holds fewer. Missing files read as empty.
func tailLines(path string, n int) ([]byte, error) {
	if n <= 0 {
		return []byte{}, nil
	}
	cur, err := lastLines(path, n)
	if err != nil {
		return nil, err
	}
	if got := countLines(cur); got < n {
		prev, err := lastLines(path+".1", n-got)
		if err != nil {
			return nil, err
		}
		cur = append(prev, cur...)
	}
	return cur, nil
}

func countLines(b []byte) int {
	n := bytes.Count(b, []byte{'\n'})
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}

// maxTailBytes bounds what one tail reads of a log file.
const maxTailBytes = 8 << 20

// lastLines reads path backwards in chunks until it holds n lines, or
// maxTailBytes.
func lastLines(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return []byte{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	end := st.Size()
	const chunk = 64 << 10
	var buf []byte
	for pos := end; pos > 0; {
		step := min(int64(chunk), pos)
		pos -= step
		b := make([]byte, step)
		if _, err := f.ReadAt(b, pos); err != nil && err != io.EOF {
			return nil, err
		}
		buf = append(b, buf...)
		// n lines need n+1 newlines before them (or the file start); a
		// trailing newline does not start a line.
		body := buf
		if len(body) > 0 && body[len(body)-1] == '\n' {
			body = body[:len(body)-1]
		}
		if bytes.Count(body, []byte{'\n'}) >= n {
			break
		}
		if len(buf) >= maxTailBytes {
			// A tail never reads more than maxTailBytes (a log of one
			// endless line must not be read whole): keep its end.
			buf = buf[len(buf)-maxTailBytes:]
			break
		}
	}
	body := buf
	trail := len(body) > 0 && body[len(body)-1] == '\n'
	if trail {
		body = body[:len(body)-1]
	}
	for i, k := len(body)-1, 0; i >= 0; i-- {
		if body[i] == '\n' {
			k++
			if k == n {
				body = body[i+1:]
				break
			}
		}
	}
	out := append([]byte{}, body...)
	if trail {
		out = append(out, '\n')
	}
	return out, nil
}
