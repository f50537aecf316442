package control

// Executor calls off the loop (Config.Background). A round stores a
// start, a reconfiguration or a preemption before the executor acts on it,
// and Observe stores a node-down or cordon move before the stop; what is
// left, the executor's call, can take minutes (a checkpoint wait is
// bounded only by --wait-timeout). Run inline, it held the daemon's loop:
// while one job checkpointed, no heartbeat was read, no Xid cordoned a
// GPU, no hang or dead server was noticed and no other job was placed.
// In the background the loop goes on; the job itself stays out of the
// rounds and of the observations' finish and failure handling until its
// call returns (unsettled), its devices held, and the news the executor
// gave meanwhile is applied then.

// later runs fn, an executor call on behalf of job id whose new state is
// stored, in the background when Config.Background is set (errors are
// logged, as the loop logs a round's), else at once (its error returned).
// The caller must not hold d.mu.
func (d *Daemon) later(id, what string, fn func() error) error {
	if !d.cfg.Background {
		return fn()
	}
	d.mu.Lock()
	d.busy[id]++
	d.mu.Unlock()
	d.working.Add(1)
	go func() {
		defer d.working.Done()
		err := fn()
		d.mu.Lock()
		if d.busy[id]--; d.busy[id] <= 0 {
			delete(d.busy, id)
		}
		d.mu.Unlock()
		if err != nil {
			d.log.Warn(what, "job", id, "err", err)
		}
		d.Kick() // what it settled may let a round place jobs
	}()
	return nil
}

// WaitBackground waits for the executor calls under way in the
// background (Config.Background): before the store is closed at
// shutdown, and in tests.
func (d *Daemon) WaitBackground() { d.working.Wait() }
