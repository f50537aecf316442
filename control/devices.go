package control

// Which job holds which GPU and CPU core of each server.

import (
	"fmt"

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

// devicesFor picks free device and core ids for allocs, lowest first;
// devices self holds count as free (a reconfiguration may keep them).
func (d *Daemon) devicesFor(allocs []sched.Alloc, self string) ([]launch.Server, error) {
	var out []launch.Server
	for _, a := range allocs {
		info := d.cfg.Servers[a.Server]
		s := launch.Server{Name: info.Name, Address: info.Address}
		for k, o := range d.owner[a.Server].gpu {
			if (o == "" || o == self) && len(s.GPUs) < a.GPUs {
				s.GPUs = append(s.GPUs, k)
			}
		}
		for k, o := range d.owner[a.Server].cpu {
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
	return out, nil
}
