package jobdetail

import (
	"fmt"
	"math"
	"strings"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/tui/common"
)

// Plot draws a sensitivity curve (throughput against GPUs) in braille dots,
// w cells wide and h cells high including the axes, with the current GPU
// count marked on the x axis (▲) and its point drawn in the mark style.
//
// It is drawn here rather than with ntcharts: no ntcharts/v2 is on the
// module proxy and ntcharts v0.x builds on Bubble Tea and Lip Gloss v1.
func Plot(st common.Styles, pts []perf.CurvePoint, current, w, h int) []string {
	const yLabelW = 7
	pw, ph := w-yLabelW-1, h-2 // plot cells
	if pw < 8 || ph < 2 || len(pts) == 0 {
		return []string{st.Faint.Render("(no room for the curve)")}
	}
	maxG, maxT := 1, 0.0
	for _, p := range pts {
		maxG = max(maxG, p.GPUs)
		maxT = math.Max(maxT, p.Throughput)
	}
	if maxT <= 0 {
		maxT = 1
	}
	dw, dh := pw*2, ph*4 // dots
	grid := make([][]bool, dh)
	for i := range grid {
		grid[i] = make([]bool, dw)
	}
	xOf := func(g int) int {
		if maxG == 1 {
			return 0
		}
		return int(math.Round(float64(g-1) / float64(maxG-1) * float64(dw-1)))
	}
	yOf := func(t float64) int { return dh - 1 - int(math.Round(t/maxT*float64(dh-1))) }
	set := func(x, y int) {
		if x >= 0 && x < dw && y >= 0 && y < dh {
			grid[y][x] = true
		}
	}
	px, py := -1, -1
	for _, p := range pts {
		x, y := xOf(p.GPUs), yOf(p.Throughput)
		if px < 0 {
			set(x, y)
		} else {
			line(px, py, x, y, set)
		}
		px, py = x, y
	}
	curX, curT := -1, 0.0
	for _, p := range pts {
		if p.GPUs == current {
			curX, curT = xOf(p.GPUs), p.Throughput
		}
	}
	curCell, curRow := -1, -1
	if curX >= 0 {
		curCell, curRow = curX/2, yOf(curT)/4
	}
	lines := make([]string, 0, h)
	for r := range ph {
		label := ""
		switch r {
		case 0:
			label = short(maxT)
		case ph - 1:
			label = "0"
		case ph / 2:
			label = short(maxT / 2)
		}
		var b strings.Builder
		b.WriteString(common.PadLeft(label, yLabelW))
		b.WriteString("┤")
		var run strings.Builder
		flush := func() {
			if run.Len() > 0 {
				b.WriteString(st.Plot.Render(run.String()))
				run.Reset()
			}
		}
		for c := range pw {
			ch := braille(grid, c*2, r*4)
			if c == curCell && r == curRow {
				flush()
				b.WriteString(st.Mark.Render(string(ch)))
				continue
			}
			run.WriteRune(ch)
		}
		flush()
		lines = append(lines, b.String())
	}
	// x axis with ticks every 8 GPUs, and the marker line
	axis := []rune(strings.Repeat("─", pw))
	labels := []rune(strings.Repeat(" ", pw+4))
	for g := 8; g <= maxG; g += 8 {
		c := xOf(g) / 2
		axis[c] = '┬'
		s := fmt.Sprint(g)
		start := min(max(0, c-len(s)+1), len(labels)-len(s))
		copy(labels[start:], []rune(s))
	}
	copy(labels[0:], []rune("1"))
	ax := string(axis)
	if curCell >= 0 {
		ax = string(axis[:curCell]) + st.Mark.Render("▲") + string(axis[curCell+1:])
	}
	lines = append(lines, strings.Repeat(" ", yLabelW)+"└"+ax)
	lines = append(lines, strings.Repeat(" ", yLabelW+1)+strings.TrimRight(string(labels), " "))
	return lines
}

// short formats a throughput in at most 7 cells.
func short(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// braille is the braille cell for dots (x..x+1, y..y+3).
func braille(grid [][]bool, x, y int) rune {
	bits := [4][2]rune{{0x01, 0x08}, {0x02, 0x10}, {0x04, 0x20}, {0x40, 0x80}}
	r := rune(0x2800)
	for dy := range 4 {
		for dx := range 2 {
			if y+dy < len(grid) && x+dx < len(grid[y+dy]) && grid[y+dy][x+dx] {
				r |= bits[dy][dx]
			}
		}
	}
	return r
}

// line draws a segment with Bresenham's algorithm.
func line(x0, y0, x1, y1 int, set func(x, y int)) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		set(x0, y0)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
