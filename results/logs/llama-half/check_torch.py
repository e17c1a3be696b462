#!/usr/bin/python3
"""results/logs/llama-half.md's independent check: scripts/make_golden.py's Llama (PyTorch, float64, written
from the math, not from the C++) on a run<i>.bin of perturbed_init.cc's DUMP_STEP; prints the loss, the global
gradient norm, and per layer the residual stream's gradient at its largest row (b, t) and over every other row.

Usage: /usr/bin/python3 check_torch.py run0.bin run1.bin
"""
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import make_golden as g  # noqa: E402

g.LLAMA.update({"L": 8, "C": 64, "NH": 4, "KV": 2, "T": 32, "V": 256, "F": 176, "EPS": 1e-5})
B, TN = 16, 32


def load(path):
    lay = g.llama_layout()
    n = sum(int(np.prod(s)) for _, s, _ in lay)
    raw = Path(path).read_bytes()
    flat = np.frombuffer(raw[: 8 * n], dtype=np.float64)
    ids = np.frombuffer(raw[8 * n:], dtype=np.int32).reshape(2, B, TN)
    p, off = {}, 0
    for name, shape, _ in lay:
        k = int(np.prod(shape))
        p[name] = torch.tensor(flat[off: off + k].reshape(shape), requires_grad=True)
        off += k
    return p, torch.tensor(ids[0], dtype=torch.long), torch.tensor(ids[1], dtype=torch.long)


def loss_and_stream(p, tokens, targets):
    """g.llama_loss's forward, keeping each layer's input x (retain_grad) for the per-layer gradients."""
    c, nh, kv, f, eps, theta = 64, 4, 2, 176, g.LLAMA["EPS"], g.LLAMA["THETA"]
    hs = c // nh
    causal = torch.ones(TN, TN, dtype=torch.bool).tril()
    x, stream = p["wte"][tokens], []
    for l in range(g.LLAMA["L"]):
        x.retain_grad()
        stream.append(x)
        h = g.rms_norm(x, p["ln1w"][l], eps)
        q, k, v = (h @ p["qkvw"][l].T).split([nh * hs, kv * hs, kv * hs], dim=-1)
        q = g.rotary(q.view(B, TN, nh, hs).transpose(1, 2), theta)
        k = g.rotary(k.view(B, TN, kv, hs).transpose(1, 2), theta).repeat_interleave(nh // kv, dim=1)
        v = v.view(B, TN, kv, hs).transpose(1, 2).repeat_interleave(nh // kv, dim=1)
        att = torch.softmax(((q @ k.transpose(-2, -1)) / math.sqrt(hs)).masked_fill(~causal, float("-inf")), dim=-1)
        x = x + (att @ v).transpose(1, 2).reshape(B, TN, c) @ p["attprojw"][l].T
        gate, up = (g.rms_norm(x, p["ln2w"][l], eps) @ p["fcw"][l].T).split(f, dim=-1)
        x = x + (F.silu(gate) * up) @ p["fcprojw"][l].T
    logits = g.rms_norm(x, p["lnfw"], eps) @ p["lmheadw"].T
    return F.cross_entropy(logits.reshape(-1, g.LLAMA["V"]), targets.reshape(-1)), stream


def main():
    for path in sys.argv[1:]:
        p, tokens, targets = load(path)
        loss, stream = loss_and_stream(p, tokens, targets)
        loss.backward()
        norm = math.sqrt(sum(float((t.grad ** 2).sum()) for t in p.values()))
        print(f"{path}: loss {loss.item():.6f}, global gradient norm {norm:.6f}")
        rows = stream[0].grad.reshape(-1, 64)
        top = int(rows.norm(dim=1).argmax())
        print(f"  largest row of the embedding's gradient: b {top // TN}, t {top % TN}")
        for l, x in enumerate(stream):
            r = x.grad.reshape(-1, 64)
            rest = torch.cat([r[:top], r[top + 1:]]).norm().item()
            print(f"  layer {l}'s input: |grad| at that row {r[top].norm().item():.3e}, every other row {rest:.3e}")


if __name__ == "__main__":
    main()
