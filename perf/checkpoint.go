package perf

import "math"

// Checkpoint intervals (Young 1974, Daly 2006): a job that checkpoints
// every τ seconds, each checkpoint costing C seconds, on hardware that
// fails every M seconds on average, loses about C/τ of its time to
// checkpoints and τ/(2M) to the work redone after a failure; the sum is
// least at τ ≈ sqrt(2·C·M). All of it is pure: figures in, an interval out.

// DefaultServerMTBF is the mean time between failures of one server,
// assumed until failures are observed (a day: a pessimistic figure for a
// GPU server, counting the crashes of the jobs on it, not only the
// hardware's); seconds.
const DefaultServerMTBF = 24 * 3600.0

// MinSaveIntervalS is the shortest checkpoint interval chosen (seconds):
// below it a job would spend more time writing checkpoints than the
// failures it guards against cost, for any plausible cost and MTBF.
const MinSaveIntervalS = 60.0

// CheckpointBytesPerParam is what a checkpoint writes per parameter when
// its cost has not been measured: bf16 weights (2 B), fp32 master weights
// (4 B) and Adam's two moments (8 B), plus 2 B of slack for the rest.
const CheckpointBytesPerParam = 16

// DefaultCheckpointGBps is the write bandwidth a checkpoint is assumed to
// get when its cost has not been measured (GB/s, the whole job: one
// NVMe or a share of a parallel file system).
const DefaultCheckpointGBps = 1.0

// MinCheckpointS is the least a checkpoint is assumed to cost when it has
// not been measured (seconds: process coordination and the file system's
// fixed costs).
const MinCheckpointS = 2.0

// CheckpointCostEstimate is the assumed cost in seconds of checkpointing a
// model of params parameters (before a checkpoint has been measured).
func CheckpointCostEstimate(params float64) float64 {
	return max(MinCheckpointS, params*CheckpointBytesPerParam/(DefaultCheckpointGBps*1e9))
}

// MTBF is the mean time between failures (seconds) of a job on servers
// servers, from what has been observed: failures over exposureS
// server-seconds, with DefaultServerMTBF counted as one failure already
// observed over that long (so a few quiet hours do not stretch it, and one
// failure early on does not collapse it).
func MTBF(failures int, exposureS float64, servers int) float64 {
	per := (DefaultServerMTBF + max(exposureS, 0)) / float64(1+max(failures, 0))
	return per / float64(max(servers, 1))
}

// SaveInterval is the checkpoint interval for a checkpoint costing costS
// seconds on a job whose MTBF is mtbfS, in iterations of iterS seconds
// (the predicted or measured iteration time): Young/Daly's sqrt(2·C·M), at
// least MinSaveIntervalS and one iteration, at most the job's iterations
// (0: no bound). It returns the interval in iterations and in seconds;
// (0, 0) when an input is not positive.
func SaveInterval(costS, mtbfS, iterS float64, iterations int) (int, float64) {
	if !(costS > 0) || !(mtbfS > 0) || !(iterS > 0) || math.IsInf(costS+mtbfS+iterS, 0) {
		return 0, 0
	}
	tau := max(math.Sqrt(2*costS*mtbfS), MinSaveIntervalS)
	n := max(int(math.Round(tau/iterS)), 1)
	if tau/iterS > float64(math.MaxInt32) {
		n = math.MaxInt32
	}
	if iterations > 0 {
		n = min(n, iterations)
	}
	return n, float64(n) * iterS
}
