package common

// letters name jobs in the cluster grid and its legend, so that the grid
// reads without colour too. Past them every job shares Overflow: a letter
// never names two jobs at once.
const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// Overflow marks the GPUs of jobs beyond the letters (the server's job
// list names them).
const Overflow = "+"

// Palette gives each live job a stable slot: its colour and its letter stay
// the same while the job holds GPUs, and a new job takes the lowest free
// slot so that jobs on screen at once differ.
type Palette struct {
	slot map[string]int
	used map[int]string
}

// NewPalette is an empty palette.
func NewPalette() *Palette {
	return &Palette{slot: map[string]int{}, used: map[int]string{}}
}

// Retain forgets the jobs not in live and gives the new ones slots.
func (p *Palette) Retain(live []string) {
	keep := make(map[string]bool, len(live))
	for _, id := range live {
		keep[id] = true
	}
	for id, s := range p.slot {
		if !keep[id] {
			delete(p.slot, id)
			delete(p.used, s)
		}
	}
	for _, id := range live {
		p.Slot(id)
	}
}

// Slot is id's slot, assigned on first use.
func (p *Palette) Slot(id string) int {
	if s, ok := p.slot[id]; ok {
		return s
	}
	s := 0
	for p.used[s] != "" {
		s++
	}
	p.slot[id], p.used[s] = s, id
	return s
}

// Letter is the letter of id's slot, Overflow past the letters.
func (p *Palette) Letter(id string) string {
	s := p.Slot(id)
	if s >= len(letters) {
		return Overflow
	}
	return letters[s : s+1]
}
