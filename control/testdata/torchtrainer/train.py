#!/usr/bin/python3
"""A small Megatron-shaped GPT trainer: the real-training fixture of replan's
end-to-end test (issue 13).

It is launched by replan's rendered torchrun command and accepts the Megatron
arguments replan renders. It trains a small GPT-style transformer with
torch.distributed (gloo) and DistributedDataParallel, data parallel over all
ranks (TP = PP = 1 only), on synthetic token sequences made by a generator
seeded with the global sample number, so a global batch is the same samples
whatever the DP size.

The math is DP-invariant: iteration i reads global samples
[(i-1)*B, i*B) (B = --global-batch-size); rank r's micro-batch m holds samples
m*mb*DP + r*mb ... + mb-1; the loss of an iteration is the sum of the
per-sample losses divided by B (gradient accumulation = B / (mb * DP)), and
DDP's average over ranks is undone by scaling each rank's loss by DP, so the
gradient is that of the global-batch mean whatever DP is. It computes in
float64 so that runs with different DP sizes differ only by the order of
floating-point reductions.

It prints Megatron's iteration line (what replan's agent/logparse reads),
with the loss. With --exit-signal-handler, SIGTERM makes every rank finish
the iteration, agree (all-reduce), save a checkpoint in Megatron's layout
(<save>/iter_NNNNNNN/mp_rank_00/model_optim_rng.pt and
<save>/latest_checkpointed_iteration.txt) with the model, the optimizer, the
RNG state and the sample counter, and exit 0. With --load it resumes at the
next iteration with any DP size.

Each rank is one "GPU": a CPU process that does the math (float64, one
thread) and, with TRAINER_FORWARD_S, drives an emulated device: a forward
pass over n samples also spends n * TRAINER_FORWARD_S seconds of device
time, its backward twice that (a transformer's backward is about twice its
forward: perf's k_bwd = 2), waited for the way a host thread waits for its
GPU. Device time runs in parallel across ranks, so throughput grows with DP
however few cores the machine has; the CPU math alone would not (the test
machine has two cores for all its ranks). devprofile.py measures a forward
pass of this device the way a profiler measures a GPU's.

Environment (for tests only, none changes the math):
  TRAINER_FORWARD_S   emulated device seconds per sample of a forward pass
  TRAINER_LOSS_LOG    file rank 0 appends "iteration loss" lines to
                      (not in a profile run: REPLAN_PROFILE_RUN set)
  TRAINER_SLOW_FILE   file of "ADDRESS FACTOR" lines, read at every
                      iteration: a rank on the host with that address
                      (the one it reaches MASTER_ADDR from) takes FACTOR
                      times as long for each iteration's work, as on a
                      throttled GPU
"""

import argparse
import datetime
import math
import os
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args():
    p = argparse.ArgumentParser(description="replan's small Megatron-shaped GPT trainer", allow_abbrev=False)
    p.add_argument("--num-layers", type=int, default=2)
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--num-attention-heads", type=int, default=4)
    p.add_argument("--seq-length", type=int, default=32)
    p.add_argument("--max-position-embeddings", type=int, default=None)
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--micro-batch-size", type=int, required=True)
    p.add_argument("--global-batch-size", type=int, required=True)
    p.add_argument("--train-iters", type=int, required=True)
    p.add_argument("--save", default=None)
    p.add_argument("--load", default=None)
    p.add_argument("--save-interval", type=int, default=None)
    p.add_argument("--exit-signal-handler", action="store_true")
    p.add_argument("--log-interval", type=int, default=1)
    p.add_argument("--tensor-model-parallel-size", type=int, default=1)
    p.add_argument("--pipeline-model-parallel-size", type=int, default=1)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--lr", type=float, default=1e-3)
    # Rendered by replan for real Megatron; meaningless on CPU in float64.
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--ckpt-format", default="torch")
    args, unknown = p.parse_known_args()
    if unknown:
        print(f"trainer: ignoring arguments it does not use: {' '.join(unknown)}", file=sys.stderr, flush=True)
    if args.max_position_embeddings is None:
        args.max_position_embeddings = args.seq_length
    if args.max_position_embeddings < args.seq_length:
        sys.exit(f"trainer: --max-position-embeddings {args.max_position_embeddings} < --seq-length {args.seq_length}")
    if args.tensor_model_parallel_size != 1 or args.pipeline_model_parallel_size != 1:
        sys.exit(f"trainer: only TP = PP = 1 (data parallel) is supported, asked for "
                 f"TP = {args.tensor_model_parallel_size}, PP = {args.pipeline_model_parallel_size}")
    if args.hidden_size % args.num_attention_heads:
        sys.exit(f"trainer: --hidden-size {args.hidden_size} is not a multiple of --num-attention-heads {args.num_attention_heads}")
    return args


class Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(h // self.heads)
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.tok = nn.Embedding(a.vocab_size, a.hidden_size)
        self.pos = nn.Embedding(a.max_position_embeddings, a.hidden_size)
        self.blocks = nn.ModuleList(Block(a.hidden_size, a.num_attention_heads) for _ in range(a.num_layers))
        self.ln = nn.LayerNorm(a.hidden_size)
        self.head = nn.Linear(a.hidden_size, a.vocab_size, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def device(seconds):
    """Waits for the emulated device (see the module's doc)."""
    if seconds > 0:
        time.sleep(seconds)


def forward_s():
    return float(os.environ.get("TRAINER_FORWARD_S", "0") or 0)


def my_address():
    """The address this host reaches MASTER_ADDR from ("" when unknown)."""
    import socket
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((os.environ.get("MASTER_ADDR", "127.0.0.1"), 9))
            return s.getsockname()[0]
    except OSError:
        return ""


def slow_factor(me):
    """This host's device slowdown from TRAINER_SLOW_FILE (1 when none)."""
    path = os.environ.get("TRAINER_SLOW_FILE")
    if not path or not me:
        return 1.0
    try:
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) == 2 and fields[0] == me:
                    return float(fields[1])
    except OSError:
        pass
    return 1.0


def sample(seed, n, seq, vocab):
    """Global sample n: seq+1 tokens from a generator seeded by n. Each
    sequence counts up from a random start by a random stride (1..4), with
    a little noise, so the model has something to learn."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + n)
    start = int(torch.randint(vocab, (1,), generator=g))
    stride = 1 + int(torch.randint(4, (1,), generator=g))
    t = (start + stride * torch.arange(seq + 1)) % vocab
    noise = torch.rand(seq + 1, generator=g) < 0.1
    return torch.where(noise, torch.randint(vocab, (seq + 1,), generator=g), t)


def gloo_interface(master):
    """The interface whose address reaches the master (on the master: the
    one that holds its address), for gloo on hosts with several."""
    if os.environ.get("GLOO_SOCKET_IFNAME"):
        return
    try:
        out = subprocess.run(["ip", "-o", "-4", "addr", "show", "to", master], capture_output=True, text=True, timeout=5).stdout.split()
        dev = out[1] if len(out) > 1 else ""
        if not dev:
            out = subprocess.run(["ip", "-o", "route", "get", master], capture_output=True, text=True, timeout=5).stdout.split()
            dev = out[out.index("dev") + 1] if "dev" in out else ""
        if dev:
            os.environ["GLOO_SOCKET_IFNAME"] = dev
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        pass


def ckpt_dir(root, it):
    return os.path.join(root, f"iter_{it:07d}")


def save(args, it, model, opt, consumed, rank):
    """Megatron's layout: iter_NNNNNNN/mp_rank_00/model_optim_rng.pt, then
    latest_checkpointed_iteration.txt (atomically, after every rank is
    here). DP ranks hold the same state: rank 0 writes it."""
    if rank == 0:
        d = os.path.join(ckpt_dir(args.save, it), "mp_rank_00")
        os.makedirs(d, exist_ok=True)
        state = {
            "iteration": it,
            "consumed_train_samples": consumed,
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "rng_state": {"torch": torch.get_rng_state()},
            "args": vars(args),
        }
        tmp = os.path.join(d, "model_optim_rng.pt.tmp")
        torch.save(state, tmp)
        os.replace(tmp, os.path.join(d, "model_optim_rng.pt"))
    dist.barrier()
    if rank == 0:
        marker = os.path.join(args.save, "latest_checkpointed_iteration.txt")
        with open(marker + ".tmp", "w") as f:
            f.write(f"{it}\n")
        os.replace(marker + ".tmp", marker)
        print(f"saved checkpoint at iteration {it:8d} to {args.save}", flush=True)
    dist.barrier()


def load(args, model, opt):
    """Returns (iteration, consumed samples) of the latest checkpoint under
    --load, (0, 0) when there is none."""
    if not args.load:
        return 0, 0
    marker = os.path.join(args.load, "latest_checkpointed_iteration.txt")
    if not os.path.exists(marker):
        return 0, 0
    with open(marker) as f:
        it = int(f.read().strip())
    state = torch.load(os.path.join(ckpt_dir(args.load, it), "mp_rank_00", "model_optim_rng.pt"))
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng_state"]["torch"])
    if state["consumed_train_samples"] != it * args.global_batch_size:
        sys.exit(f"trainer: checkpoint at iteration {it} consumed {state['consumed_train_samples']} samples, "
                 f"want {it * args.global_batch_size} (another global batch?)")
    return it, state["consumed_train_samples"]


def main():
    args = parse_args()
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    gloo_interface(os.environ.get("MASTER_ADDR", "127.0.0.1"))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, dp = dist.get_rank(), dist.get_world_size()
    mb, gb = args.micro_batch_size, args.global_batch_size
    if gb % (mb * dp):
        sys.exit(f"trainer: --global-batch-size {gb} is not a multiple of micro-batch {mb} x DP {dp}")
    ga = gb // (mb * dp)

    stop = {"signal": False}
    if args.exit_signal_handler:
        def on_term(signum, frame):
            stop["signal"] = True
        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)

    torch.manual_seed(args.seed)
    model = GPT(args)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    it, consumed = load(args, model, opt)
    if rank == 0:
        print(f"trainer: torch {torch.__version__}, DP {dp}, micro-batch {mb}, gradient accumulation {ga}, "
              f"global batch {gb}, {'resuming at iteration ' + str(it + 1) if it else 'starting at iteration 1'}", flush=True)
    ddp = DDP(model)
    start = it
    fwd_s = forward_s()
    me = my_address()
    # A profile run of replan (REPLAN_PROFILE_RUN) logs no loss: the log
    # is the job's.
    loss_log = os.environ.get("TRAINER_LOSS_LOG") if rank == 0 and not os.environ.get("REPLAN_PROFILE_RUN") else None
    while it < args.train_iters:
        t0 = time.time()
        it += 1
        base = (it - 1) * gb
        total = torch.zeros(1)
        opt.zero_grad(set_to_none=False)
        for m in range(ga):
            first = base + m * mb * dp + rank * mb
            x = torch.stack([sample(args.seed, first + j, args.seq_length, args.vocab_size) for j in range(mb)])
            logits = ddp(x[:, :-1])
            device(fwd_s * mb)
            per_token = F.cross_entropy(logits.reshape(-1, args.vocab_size), x[:, 1:].reshape(-1), reduction="none")
            per_sample = per_token.view(mb, -1).mean(dim=1)
            loss = per_sample.sum() / gb
            total += loss.detach()
            if m < ga - 1:
                with ddp.no_sync():
                    (loss * dp).backward()
            else:
                (loss * dp).backward()  # DDP averages over DP: the gradient of the global mean
            device(2 * fwd_s * mb)
        opt.step()
        slow = slow_factor(me)
        if slow > 1:
            # This host's "GPU" runs 1/slow as fast: all of its work
            # (the math and the device time) takes slow times as long.
            device((slow - 1) * (time.time() - t0))
        consumed += gb
        dist.all_reduce(total)
        # Every rank agrees whether to stop (Megatron's exit-signal handler).
        flag = torch.tensor([1.0 if stop["signal"] else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if rank == 0 and it % args.log_interval == 0:
            ms = (time.time() - t0) * 1000
            print(f" [{datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S')}] iteration {it:8d}/{args.train_iters:8d} |"
                  f" consumed samples: {consumed:12d} | elapsed time per iteration (ms): {ms:.1f} |"
                  f" learning rate: {args.lr:.6E} | global batch size: {gb:5d} | lm loss: {float(total):.10E} |"
                  f" loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |", flush=True)
            if loss_log:
                with open(loss_log, "a") as f:
                    f.write(f"{it} {float(total):.17g} {dp}\n")
        if flag.item() > 0:
            if args.save:
                save(args, it, model, opt, consumed, rank)
            if rank == 0:
                print(f"exiting on signal at iteration {it}", flush=True)
            dist.barrier()
            dist.destroy_process_group()
            return 0
        if args.save and args.save_interval and it % args.save_interval == 0:
            save(args, it, model, opt, consumed, rank)
    # The end is a checkpoint (as Megatron saves after its last iteration),
    # unless nothing ran (resumed at the end) or the interval just saved it.
    if args.save and it > start and not (args.save_interval and it % args.save_interval == 0):
        save(args, it, model, opt, consumed, rank)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
