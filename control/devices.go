package control

// Which job holds which GPU and CPU core of each server.

import (
	"fmt"
	"slices"

	"github.com/replan/replan/launch"
	"github.com/replan/replan/sched"
)

type serverDevices struct {
	gpu, cpu []string // job id per device, "" when free
}

// take marks the devices of servers as held by job.
func (d *Daemon) take(job string, servers []launch.Server) {
	for _, s := range servers {
		i, ok := d.srvIdx[s.Name]
		if !ok {
			continue
		}
		for _, g := range s.GPUs {
			if g < len(d.owner[i].gpu) {
				d.owner[i].gpu[g] = job
			}
		}
		for _, c := range s.CPUs {
			if c < len(d.owner[i].cpu) {
				d.owner[i].cpu[c] = job
			}
		}
	}
}

// releaseExcept frees the devices job holds outside servers.
func (d *Daemon) releaseExcept(job string, servers []launch.Server) {
	keep := map[string]bool{}
	for _, s := range servers {
		for _, g := range s.GPUs {
			keep[fmt.Sprintf("%s/g%d", s.Name, g)] = true
		}
		for _, c := range s.CPUs {
			keep[fmt.Sprintf("%s/c%d", s.Name, c)] = true
		}
	}
	for i := range d.owner {
		name := d.cfg.Servers[i].Name
		for k, o := range d.owner[i].gpu {
			if o == job && !keep[fmt.Sprintf("%s/g%d", name, k)] {
				d.owner[i].gpu[k] = ""
			}
		}
		for k, o := range d.owner[i].cpu {
			if o == job && !keep[fmt.Sprintf("%s/c%d", name, k)] {
				d.owner[i].cpu[k] = ""
			}
		}
	}
}

// release frees every device job holds.
func (d *Daemon) release(job string) {
	for i := range d.owner {
		for k, o := range d.owner[i].gpu {
			if o == job {
				d.owner[i].gpu[k] = ""
			}
		}
		for k, o := range d.owner[i].cpu {
			if o == job {
				d.owner[i].cpu[k] = ""
			}
		}
	}
}

// devicesIn picks free device and core ids for allocs, lowest first
// (devices self holds count as free: a reconfiguration may keep them),
// over a scratch copy of the device owners for a group of decisions stored
// together: what earlier decisions of the group took is marked there; the
// daemon's table changes only once the group is stored.
func (d *Daemon) devicesIn(scratch map[int]*serverDevices, allocs []sched.Alloc, self string) ([]launch.Server, error) {
	var out []launch.Server
	for _, a := range allocs {
		sd := scratch[a.Server]
		if sd == nil {
			sd = &serverDevices{gpu: slices.Clone(d.owner[a.Server].gpu), cpu: slices.Clone(d.owner[a.Server].cpu)}
			scratch[a.Server] = sd
		}
		info := d.cfg.Servers[a.Server]
		s := launch.Server{Name: info.Name, Address: info.Address}
		for k, o := range sd.gpu {
			if (o == "" || o == self) && len(s.GPUs) < a.GPUs && !d.cordoned(a.Server, k) {
				s.GPUs = append(s.GPUs, k)
			}
		}
		for k, o := range sd.cpu {
			if (o == "" || o == self) && len(s.CPUs) < a.CPUs {
				s.CPUs = append(s.CPUs, k)
			}
		}
		if len(s.GPUs) < a.GPUs || len(s.CPUs) < a.CPUs {
			return nil, fmt.Errorf("server %s has %d free GPUs and %d free cores, decision wants %d and %d", info.Name, len(s.GPUs), len(s.CPUs), a.GPUs, a.CPUs)
		}
		if a.GPUs > 0 {
			out = append(out, s)
		}
	}
	for _, s := range out {
		sd := scratch[d.srvIdx[s.Name]]
		for _, g := range s.GPUs {
			sd.gpu[g] = self
		}
		for _, c := range s.CPUs {
			sd.cpu[c] = self
		}
	}
	return out, nil
}
