#!/usr/bin/env python3
"""Measure how a transformer's iteration time and peak GPU memory depend on
the micro-batch, on one GPU: the measurement behind perf's k_launch term and
the activation factor (docs/perf.md, "Compute depends on the micro-batch").

Pure PyTorch (no transformers package): BERT-large (replan's `bert`: 24
layers, hidden 1024, 16 heads, sequence 512, vocabulary 30522) and GPT-2 XL
(`gpt2`: 48 layers, hidden 1600, 25 heads, sequence 1024, vocabulary 50257),
RoBERTa-large (`roberta`: BERT-large's layers, vocabulary 50265) and ViT-B/16
(`vit`: 12 layers, hidden 768, 12 heads, 197 tokens of 224x224 images, a
1000-class head on the class token).
fp32 master weights, bf16 autocast, AdamW (16 bytes per parameter, as
perf's memory model), a language-model loss over every position (fp32
logits). Each plan is micro-batch x GA at a fixed global batch on one GPU
(DP 1); the iteration is GA forward+backward passes and one optimizer step.

Prints one CSV row per plan:
  gpu,model,attn,mb,ga,iter_s,iter_s_min,peak_reserved_gib,peak_alloc_gib,status

Usage: python3 mbscale.py [--model bert,gpt2,roberta,vit] [--attn sdpa|math] [--iters 4]
"""
import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ARCHS = {
    # name: layers, hidden, heads, seq, vocab, causal, global batch, micro-batches
    "bert": (24, 1024, 16, 512, 30522, False, 32, [1, 2, 4, 8, 16, 32]),
    "gpt2": (48, 1600, 25, 1024, 50257, True, 16, [1, 2, 4, 8, 16]),
    "roberta": (24, 1024, 16, 512, 50265, False, 64, [1, 2, 4, 8, 16, 32, 64]),
    # ViT-B/16: 224x224 images in 196 patches and a class token, 1000 classes
    "vit": (12, 768, 12, 197, 0, False, 64, [1, 2, 4, 8, 16, 32, 64]),
}


class Layer(nn.Module):
    def __init__(self, h, heads, causal, attn):
        super().__init__()
        self.h, self.heads, self.causal, self.attn = h, heads, causal, attn
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        if self.attn == "sdpa":
            a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=self.causal)
        else:  # the attention scores, softmax and dropout mask kept for the backward
            sc = q @ k.transpose(-2, -1) / math.sqrt(h // self.heads)
            if self.causal:
                sc = sc.masked_fill(torch.ones(s, s, device=x.device, dtype=torch.bool).triu(1), float("-inf"))
            a = self.drop(sc.softmax(-1)) @ v
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, s, h)))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class Model(nn.Module):
    def __init__(self, layers, h, heads, seq, vocab, causal, attn):
        super().__init__()
        self.vision = vocab == 0
        if self.vision:  # patches of 16x16 pixels, a class token
            self.emb = nn.Conv2d(3, h, 16, 16)
            self.cls = nn.Parameter(torch.zeros(1, 1, h))
        else:
            self.emb = nn.Embedding(vocab, h)
        self.pos = nn.Embedding(seq, h)
        self.layers = nn.ModuleList(Layer(h, heads, causal, attn) for _ in range(layers))
        self.ln = nn.LayerNorm(h)
        self.head = nn.Linear(h, 1000 if self.vision else vocab, bias=False)

    def forward(self, ids):
        if self.vision:
            x = self.emb(ids).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1)
        else:
            x = self.emb(ids)
        x = x + self.pos.weight[: x.shape[1]]
        for l in self.layers:
            x = l(x)
        if self.vision:
            return self.head(self.ln(x[:, 0])).float()
        return self.head(self.ln(x)).float()


def run(name, attn, iters, gpu):
    layers, h, heads, seq, vocab, causal, gb, mbs = ARCHS[name]
    torch.manual_seed(0)
    model = Model(layers, h, heads, seq, vocab, causal, attn).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    nparam = sum(p.numel() for p in model.parameters())
    print(f"# {name}: {nparam/1e6:.0f} M parameters", file=sys.stderr, flush=True)
    for mb in mbs:
        ga = gb // mb
        if vocab == 0:
            ids = torch.randn(mb, 3, 224, 224, device="cuda")
            labels = torch.randint(0, 1000, (mb,), device="cuda")
        else:
            ids = torch.randint(0, vocab, (mb, seq), device="cuda")
            labels = ids.view(-1)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        times, status = [], "ok"
        try:
            for it in range(iters + 2):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(ga):
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        logits = model(ids)
                    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels)
                    (loss / ga).backward()
                    del logits, loss
                opt.step()
                opt.zero_grad(set_to_none=True)
                torch.cuda.synchronize()
                if it >= 2:
                    times.append(time.perf_counter() - t0)
        except torch.cuda.OutOfMemoryError:
            status = "oom"
            opt.zero_grad(set_to_none=True)
        res = torch.cuda.max_memory_reserved() / 2**30
        alloc = torch.cuda.max_memory_allocated() / 2**30
        med = statistics.median(times) if times else 0
        mn = min(times) if times else 0
        print(f"{gpu},{name},{attn},{mb},{ga},{med:.4f},{mn:.4f},{res:.2f},{alloc:.2f},{status}", flush=True)
    del model, opt
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bert,gpt2")
    ap.add_argument("--attn", default="sdpa")
    ap.add_argument("--iters", type=int, default=4)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    gpu = torch.cuda.get_device_name(0).replace(",", " ")
    print("gpu,model,attn,mb,ga,iter_s,iter_s_min,peak_reserved_gib,peak_alloc_gib,status", flush=True)
    for name in a.model.split(","):
        for attn in a.attn.split(","):
            run(name, attn, a.iters, gpu)


if __name__ == "__main__":
    main()
