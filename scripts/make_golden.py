#!/usr/bin/env python3
"""Writes the PyTorch golden file for reference/golden_test.cc (after llm.c's test_gpt2).

The reference GPT (reference/gpt.h) is re-implemented here in plain torch ops in float64,
independently of the C++ code: x = wte[tok] + wpe[pos]; per layer x += attproj(attn(ln1(x)))
and x += fcproj(gelu_tanh(fc(ln2(x)))); then lnf, logits = x @ wte^T (tied, no bias), and the
mean token cross-entropy. The weights are random float32 values (nonzero biases and
layernorm parameters, so their gradients are tested), converted exactly to float64; the
loss and every parameter gradient are computed in float64.

Usage: /usr/bin/python3 scripts/make_golden.py [OUT]   (default reference/testdata/gpt_tiny.bin)
       /usr/bin/python3 scripts/make_golden.py --moe [OUT]   (the MoE FFN layer alone, moe_loss below;
       default reference/testdata/moe_layer.bin, read by reference/moe_golden_test.cc)
Needs PyTorch (>= 1.12, CPU is enough): Debian's python3-torch for /usr/bin/python3, or
`pip install torch --index-url https://download.pytorch.org/whl/cpu`. Deterministic: a rerun
writes a byte-identical file.

File format, all little-endian, no padding:
  char    magic[8]        "DTBGOLD1"
  int32   L, C, NH, T, V, B, Tn
  int32   tokens[B*Tn]    row-major (B, Tn), byte ids of TEXT below
  int32   targets[B*Tn]   tokens shifted by one (the next byte)
  float32 params[P]       flat buffer, llm.c order (LAYOUT below, = gpt_param_layout)
  float64 loss            mean cross-entropy over the B*Tn tokens
  float64 grads[P]        d(mean loss)/d(params), same layout
where P = gpt_num_params. Linear weights are (out, in) as torch.nn.Linear.
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

L, C, NH, T, V = 2, 32, 4, 16, 256
B, TN = 4, 16
SEED = 20240611
MAGIC = b"DTBGOLD1"
# B sequences of TN+1 bytes each (4 * 17 = 68 bytes): inputs are the first TN, targets the last TN.
TEXT = b"It was the best of times, it was the worst of times, it was the age."

# (name, shape, kind): the 16 tensors in llm.c order. kind picks the random init: "w" weights
# N(0, 0.02); "b" biases 0.02 N(0, 1); "lnw" 1 + 0.1 N(0, 1); "lnb" 0.1 N(0, 1).
LAYOUT = [
    ("wte", (V, C), "w"),
    ("wpe", (T, C), "w"),
    ("ln1w", (L, C), "lnw"),
    ("ln1b", (L, C), "lnb"),
    ("qkvw", (L, 3 * C, C), "w"),
    ("qkvb", (L, 3 * C), "b"),
    ("attprojw", (L, C, C), "w"),
    ("attprojb", (L, C), "b"),
    ("ln2w", (L, C), "lnw"),
    ("ln2b", (L, C), "lnb"),
    ("fcw", (L, 4 * C, C), "w"),
    ("fcb", (L, 4 * C), "b"),
    ("fcprojw", (L, C, 4 * C), "w"),
    ("fcprojb", (L, C), "b"),
    ("lnfw", (C,), "lnw"),
    ("lnfb", (C,), "lnb"),
]


def make_params(gen):
    """Float32 parameters, drawn in LAYOUT order from one seeded generator."""
    out = {}
    for name, shape, kind in LAYOUT:
        z = torch.randn(shape, generator=gen, dtype=torch.float32)
        if kind in ("w", "b"):
            p = 0.02 * z
        elif kind == "lnw":
            p = 1.0 + 0.1 * z
        else:
            p = 0.1 * z
        out[name] = p.to(torch.float32)
    return out


def gpt_loss(p, tokens, targets):
    """Mean cross-entropy of the model on tokens (B, TN); p holds float64 leaf tensors."""
    b, tn = tokens.shape
    hs = C // NH
    x = p["wte"][tokens] + p["wpe"][:tn].unsqueeze(0)
    causal = torch.ones(tn, tn, dtype=torch.bool).tril()
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = qkv.split(C, dim=-1)  # q|k|v on the last dim, head h at [h*hs, (h+1)*hs)
        q = q.view(b, tn, NH, hs).transpose(1, 2)
        k = k.view(b, tn, NH, hs).transpose(1, 2)
        v = v.view(b, tn, NH, hs).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / (hs ** 0.5)
        att = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        a = (att @ v).transpose(1, 2).reshape(b, tn, C)
        x = x + (a @ p["attprojw"][l].T + p["attprojb"][l])
        h2 = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        f = F.gelu(h2 @ p["fcw"][l].T + p["fcb"][l], approximate="tanh")
        x = x + (f @ p["fcprojw"][l].T + p["fcprojb"][l])
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    logits = x @ p["wte"].T
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="mean")


# The MoE FFN layer (reference/moe.h) alone, for reference/moe_golden_test.cc: N tokens, E experts of
# hidden size FH, top-K routing by the router's softmax probabilities, capacity ceil(CF N K / E) with every
# first choice placed before any second choice, a dropped assignment contributing nothing; the output
# sum over kept assignments of p[t, e] * proj_e(gelu_tanh(fc_e(x_t))); the load-balancing loss
# AUX * E * sum_e f_e P_e (f_e: assignments to e before dropping over N K; P_e: mean probability) and the
# z-loss ZL * mean_t logsumexp(logits_t)^2; the loss sum(out * R) + aux + z.
MOE_MAGIC = b"DTBMOE01"
MOE_N, MOE_C, MOE_E, MOE_FH, MOE_K, MOE_CF, MOE_AUX, MOE_ZL = 24, 8, 4, 16, 2, 1.0, 0.1, 0.01
MOE_SEED = 20261203


def moe_loss(x, R, w):
    """(loss, out, aux, z, slots) of the MoE layer in float64; slots (N, K): row in the expert's batch, -1 dropped."""
    logits = x @ w["router"].T
    probs = torch.softmax(logits, dim=-1)
    chosen = torch.topk(probs.detach(), MOE_K, dim=-1).indices  # random weights: no ties
    capacity = math.ceil(MOE_CF * MOE_N * MOE_K / MOE_E)
    kept = [0] * MOE_E
    slots = [[-1] * MOE_K for _ in range(MOE_N)]
    for i in range(MOE_K):
        for t in range(MOE_N):
            e = int(chosen[t, i])
            if kept[e] < capacity:
                slots[t][i] = kept[e]
                kept[e] += 1
    rows = []
    for t in range(MOE_N):
        acc = torch.zeros(MOE_C, dtype=torch.float64)
        for i in range(MOE_K):
            if slots[t][i] < 0:
                continue
            e = int(chosen[t, i])
            h = F.gelu(x[t] @ w["fc"][e].T + w["fc_bias"][e], approximate="tanh")
            acc = acc + probs[t, e] * (h @ w["proj"][e].T + w["proj_bias"][e])
        rows.append(acc)
    out = torch.stack(rows)
    counts = torch.bincount(chosen.reshape(-1), minlength=MOE_E).to(torch.float64)
    aux = MOE_AUX * MOE_E * torch.sum(counts / (MOE_N * MOE_K) * probs.mean(dim=0))
    z = MOE_ZL * torch.mean(torch.logsumexp(logits, dim=-1) ** 2)
    return torch.sum(out * R) + aux + z, out, aux, z, slots


def main_moe(out_path):
    """Writes the MoE layer's golden file: see reference/moe_golden_test.cc for its format."""
    gen = torch.Generator().manual_seed(MOE_SEED)
    shapes = [("router", (MOE_E, MOE_C)), ("fc", (MOE_E, MOE_FH, MOE_C)), ("fc_bias", (MOE_E, MOE_FH)),
              ("proj", (MOE_E, MOE_C, MOE_FH)), ("proj_bias", (MOE_E, MOE_C))]
    x32 = torch.randn((MOE_N, MOE_C), generator=gen, dtype=torch.float32)
    r32 = torch.randn((MOE_N, MOE_C), generator=gen, dtype=torch.float32)
    w32 = {name: 0.5 * torch.randn(shape, generator=gen, dtype=torch.float32) for name, shape in shapes}
    x = x32.to(torch.float64).requires_grad_(True)
    w = {k: v.to(torch.float64).requires_grad_(True) for k, v in w32.items()}
    loss, out, aux, z, slots = moe_loss(x, r32.to(torch.float64), w)
    loss.backward()
    with open(out_path, "wb") as f:
        f.write(MOE_MAGIC)
        f.write(np.array([MOE_N, MOE_C, MOE_E, MOE_FH, MOE_K], dtype="<i4").tobytes())
        f.write(np.array([MOE_CF, MOE_AUX, MOE_ZL], dtype="<f8").tobytes())
        f.write(x32.numpy().astype("<f4").tobytes())
        f.write(r32.numpy().astype("<f4").tobytes())
        for name, _ in shapes:
            f.write(w32[name].numpy().astype("<f4").tobytes())
        f.write(np.array(slots, dtype="<i4").tobytes())
        f.write(np.array([aux.item(), z.item()], dtype="<f8").tobytes())
        f.write(out.detach().numpy().astype("<f8").tobytes())
        f.write(x.grad.numpy().astype("<f8").tobytes())
        for name, _ in shapes:
            f.write(w[name].grad.numpy().astype("<f8").tobytes())
    dropped = sum(s < 0 for row in slots for s in row)
    print(f"wrote {out_path}: N={MOE_N} E={MOE_E} top-{MOE_K}, {dropped} assignments dropped, loss={loss.item():.17g}")


def main():
    torch.set_num_threads(1)  # one fixed summation order, so reruns are byte-identical
    testdata = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference", "testdata"))
    if len(sys.argv) > 1 and sys.argv[1] == "--moe":
        return main_moe(sys.argv[2] if len(sys.argv) > 2 else os.path.join(testdata, "moe_layer.bin"))
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(testdata, "gpt_tiny.bin")
    assert len(TEXT) == B * (TN + 1)
    seqs = np.frombuffer(TEXT, dtype=np.uint8).astype(np.int64).reshape(B, TN + 1)
    tokens = torch.from_numpy(seqs[:, :TN].copy())
    targets = torch.from_numpy(seqs[:, 1:].copy())

    gen = torch.Generator().manual_seed(SEED)
    p32 = make_params(gen)
    # float32 -> float64 is exact, so the C++ models start from the same real numbers.
    p64 = {k: v.to(torch.float64).requires_grad_(True) for k, v in p32.items()}
    loss = gpt_loss(p64, tokens, targets)
    loss.backward()

    with open(out_path, "wb") as f:
        f.write(MAGIC)
        f.write(np.array([L, C, NH, T, V, B, TN], dtype="<i4").tobytes())
        f.write(tokens.numpy().astype("<i4").tobytes())
        f.write(targets.numpy().astype("<i4").tobytes())
        for name, _, _ in LAYOUT:
            f.write(p32[name].numpy().astype("<f4").tobytes())
        f.write(np.array([loss.item()], dtype="<f8").tobytes())
        for name, _, _ in LAYOUT:
            f.write(p64[name].grad.numpy().astype("<f8").tobytes())
    nparams = sum(int(np.prod(s)) for _, s, _ in LAYOUT)
    print(f"wrote {out_path}: P={nparams} loss={loss.item():.17g}")


if __name__ == "__main__":
    main()
