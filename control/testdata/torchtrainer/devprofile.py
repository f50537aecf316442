#!/usr/bin/python3
"""devprofile.py [architecture flags]: the forward pass of the trainer's model
on one of its devices (one process, see train.py), as a profiler measures a
GPU's: for n = 1, 2, 4, 8, 16 samples per pass, the median wall time of a
few forward passes (math on the CPU plus the emulated device time of
TRAINER_FORWARD_S). Prints one JSON line: {"samples": [...], "forward_s": [...]},
from which the test fits perf's Forward (alpha + beta * n)."""

import argparse
import json
import statistics
import sys
import time

import torch

sys.dont_write_bytecode = True  # no __pycache__ beside the fixture
import train  # noqa: E402


def main():
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--num-layers", type=int, required=True)
    p.add_argument("--hidden-size", type=int, required=True)
    p.add_argument("--num-attention-heads", type=int, required=True)
    p.add_argument("--seq-length", type=int, required=True)
    p.add_argument("--max-position-embeddings", type=int, default=None)
    p.add_argument("--vocab-size", type=int, required=True)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    if a.max_position_embeddings is None:
        a.max_position_embeddings = a.seq_length
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    torch.manual_seed(1)
    model = train.GPT(a)
    fwd_s = train.forward_s()
    ns, ts = [1, 2, 4, 8, 16], []
    model(torch.stack([train.sample(1, 0, a.seq_length, a.vocab_size)])[:, :-1])  # warm up
    for n in ns:
        x = torch.stack([train.sample(1, j, a.seq_length, a.vocab_size) for j in range(n)])[:, :-1]
        runs = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            model(x)
            train.device(fwd_s * n)
            runs.append(time.perf_counter() - t0)
        ts.append(statistics.median(runs))
    print(json.dumps({"samples": ns, "forward_s": ts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
