#!/usr/bin/python3
"""compare.py A B: the largest absolute difference between the model
parameters of the latest checkpoints under directories A and B (the
trainer's Megatron layout), and the iterations they hold, as one JSON line."""

import json
import os
import sys

import torch


def latest(root):
    with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
        it = int(f.read().strip())
    state = torch.load(os.path.join(root, f"iter_{it:07d}", "mp_rank_00", "model_optim_rng.pt"))
    return it, state


def main():
    ia, a = latest(sys.argv[1])
    ib, b = latest(sys.argv[2])
    ma, mb = a["model"], b["model"]
    if sorted(ma) != sorted(mb):
        sys.exit(f"compare: the checkpoints hold different parameters: {sorted(set(ma) ^ set(mb))}")
    diff, scale = 0.0, 0.0
    for k in ma:
        diff = max(diff, float((ma[k] - mb[k]).abs().max()))
        scale = max(scale, float(ma[k].abs().max()))
    print(json.dumps({"iteration_a": ia, "iteration_b": ib, "consumed_a": a["consumed_train_samples"],
                      "consumed_b": b["consumed_train_samples"], "max_abs_diff": diff, "max_abs_param": scale,
                      "params": sum(v.numel() for v in ma.values()), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
