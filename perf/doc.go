// Package perf answers the question every replan decision rests on: how fast
// does a job of model type M train with execution plan P on resources R?
//
// It holds
//   - model architectures (Arch): the seven models of the Morphling data plus
//     user-defined ones loaded from YAML;
//   - execution plans (Plan) and their enumeration for a GPU count and a
//     placement, with the rule that rejected each invalid plan;
//   - the per-GPU and per-server host memory estimate (Estimate);
//   - the iteration-time model of Morphling's Appendix A (Predict) with its
//     seven fittable parameters and seven more (docs/perf.md), priced by
//     the slowest link a plan's communication crosses, with compute that
//     depends on the micro-batch;
//   - fitting of those parameters from samples (Fit), of the hardware
//     terms jointly over a cluster's model types (FitShared,
//     HardwareParams), and online refit;
//   - resource sensitivity curves (Curve) with a cache.
//
// Everything here is pure: no I/O, no clock. Files are read by the callers
// (dataset/, cmd) and handed in as values or readers.
package perf
