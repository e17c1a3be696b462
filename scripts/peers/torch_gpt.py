#!/usr/bin/python3
"""PyTorch eager peer of dtbench's reference trainer, for scripts/bench-peers (issue 9).

The same GPT as reference/model/gpt.h (see scripts/make_golden.py): tied wte, learned wpe,
pre-LN blocks (x += attproj(attn(ln1(x))); x += fcproj(gelu_tanh(fc(ln2(x))))), causal
attention, lnf, logits = x wte^T, mean cross-entropy -- written as a user would in eager
PyTorch (nn.Linear, nn.LayerNorm), fp32, trained with torch.optim.AdamW at dtbench's train
defaults. Times whole training steps (forward, backward, AdamW) after warm-up and prints
one JSON object. Not a test and not an oracle: the numbers are its only output.

Threading is the caller's: --threads N sets torch.set_num_threads; OMP_NUM_THREADS,
OMP_WAIT_POLICY and OPENBLAS_NUM_THREADS come from the environment (read at import).
Usage: /usr/bin/python3 scripts/peers/torch_gpt.py --L 2 --C 64 --NH 4 --T 64 --V 256 --B 8
           --threads 1 [--warmup 2] [--steps 10]
"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x, causal):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q = q.view(B, T, self.NH, hs).transpose(1, 2)  # (B, NH, T, hs)
        k = k.view(B, T, self.NH, hs).transpose(1, 2)
        v = v.view(B, T, self.NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, NH, T, T)
        att = torch.softmax(att.masked_fill(~causal[:T, :T], float("-inf")), dim=-1)
        a = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.attproj(a)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, L, C, NH, T, V):
        super().__init__()
        self.wte = nn.Parameter(0.02 * torch.randn(V, C))
        self.wpe = nn.Parameter(0.02 * torch.randn(T, C))
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C, eps=1e-5)
        self.register_buffer("causal", torch.ones(T, T, dtype=torch.bool).tril())

    def forward(self, tokens, targets):
        B, T = tokens.shape
        x = self.wte[tokens] + self.wpe[:T]
        for b in self.blocks:
            x = b(x, self.causal)
        logits = self.lnf(x) @ self.wte.T  # tied head, no bias
        return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    for k in ("L", "C", "NH", "T", "V", "B"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (intra-op threads)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight_decay", type=float, default=0.0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    model = Gpt(a.L, a.C, a.NH, a.T, a.V)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                            weight_decay=a.weight_decay)
    n_params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(7)
    # Byte-valued tokens, as dtbench's byte-level text (the values do not change the work).
    seq = torch.randint(0, min(a.V, 256), (a.B, a.T + 1), generator=gen)
    tokens, targets = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    times, losses = [], []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(tokens, targets)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if s >= a.warmup:
            times.append(dt)
    med = statistics.median(times)
    print(json.dumps({
        "torch_version": torch.__version__,
        "threads": a.threads,
        "torch_num_threads": torch.get_num_threads(),
        "env": {k: os.environ.get(k, "") for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS",
                                                   "OPENBLAS_THREAD_TIMEOUT")},
        "model": {"L": a.L, "C": a.C, "NH": a.NH, "T": a.T, "V": a.V, "B": a.B},
        "num_params": n_params,
        "steps": a.steps,
        "step_s": times,
        "step_ms_median": med * 1e3,
        "tokens_per_s": a.B * a.T / med,
        "losses": losses,
    }))


if __name__ == "__main__":
    main()
