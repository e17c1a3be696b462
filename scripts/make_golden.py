#!/usr/bin/env python3
"""Writes the PyTorch golden file for reference/model/golden_test.cc (after llm.c's test_gpt2).

The reference GPT (reference/model/gpt.h) is re-implemented here in plain torch ops in float64,
independently of the C++ code: x = wte[tok] + wpe[pos]; per layer x += attproj(attn(ln1(x)))
and x += fcproj(gelu_tanh(fc(ln2(x)))); then lnf, logits = x @ wte^T (tied, no bias), and the
mean token cross-entropy. The weights are random float32 values (nonzero biases and
layernorm parameters, so their gradients are tested), converted exactly to float64; the
loss and every parameter gradient are computed in float64.

Usage: /usr/bin/python3 scripts/make_golden.py [OUT]   (default reference/model/testdata/gpt_tiny.bin)
       /usr/bin/python3 scripts/make_golden.py --gpt-moe [OUT]   (the model with layer 0 a mixture of experts,
       GPT_MOE below; default reference/model/testdata/gpt_moe.bin; both read by reference/model/golden_test.cc)
       /usr/bin/python3 scripts/make_golden.py --llama [OUT]   (the Llama family, LLAMA below: RMSNorm, rotary
       embeddings, grouped-query attention, SwiGLU, untied head, no biases; default
       reference/model/testdata/llama_tiny.bin, read by reference/model/llama_test.cc)
       /usr/bin/python3 scripts/make_golden.py --moe [OUT]   (the MoE FFN layer alone, moe_loss below;
       default reference/model/testdata/moe_layer.bin, read by reference/model/moe_golden_test.cc)
Needs PyTorch (>= 1.12, CPU is enough): Debian's python3-torch for /usr/bin/python3, or
`pip install torch --index-url https://download.pytorch.org/whl/cpu`. Deterministic: a rerun
writes a byte-identical file.

File format, all little-endian, no padding:
  char    magic[8]        "DTBGOLD1" ("DTBGOLD2" with --gpt-moe, "DTBGOLD3" with --llama)
  int32   L, C, NH, T, V, B, Tn
  (DTBGOLD2: int32 E, K, FREQ, FH; float64 CF, AUX, ZL)
  (DTBGOLD3: int32 KV, F; float64 THETA, EPS)
  int32   tokens[B*Tn]    row-major (B, Tn), byte ids of TEXT below
  int32   targets[B*Tn]   tokens shifted by one (the next byte)
  float32 params[P]       flat buffer, llm.c order (LAYOUT below, = gpt_param_layout; LLAMA_LAYOUT with --llama)
  float64 loss            mean cross-entropy over the B*Tn tokens
  float64 grads[P]        d(mean loss)/d(params), same layout
  (DTBGOLD2: int32 slots[Lm][B*Tn*K], each MoE layer's routing: row in the expert's batch, -1 dropped)
where P = gpt_num_params; with --gpt-moe the loss adds each MoE layer's balance and z losses. Linear weights are (out, in) as torch.nn.Linear.
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

# The MoE GPT golden (--gpt-moe, reference/model/testdata/gpt_moe.bin): the same model and batch with layer 0's FFN
# a mixture of E experts of hidden size FH, top-K, capacity factor CF per sequence (the model routes each
# sequence as one group), balance and z-loss coefficients AUX and ZL, every FREQ-th layer MoE (layer 1 dense).
GPT_MOE = {"E": 4, "K": 2, "FREQ": 2, "FH": 48, "CF": 1.0, "AUX": 0.1, "ZL": 0.01}
MAGIC_MOE = b"DTBGOLD2"

# (name, shape, kind): the 16 tensors in llm.c order. kind picks the random init: "w" weights
# N(0, 0.02); "b" biases 0.02 N(0, 1); "lnw" 1 + 0.1 N(0, 1); "lnb" 0.1 N(0, 1); "r" (a router) 0.3 N(0, 1),
# so that routing is decisive and uneven (tokens are dropped).
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


def layout(moe=None):
    """LAYOUT, or the MoE model's (reference/model/gpt.h gpt_param_layout): the dense FFN tensors over the Ld dense
    layers, then the Lm MoE layers' router and experts."""
    if moe is None:
        return LAYOUT
    lm = (L + moe["FREQ"] - 1) // moe["FREQ"]
    e, fh = moe["E"], moe["FH"]
    dense = {"fcw": (L - lm, 4 * C, C), "fcb": (L - lm, 4 * C), "fcprojw": (L - lm, C, 4 * C), "fcprojb": (L - lm, C)}
    return [(n, dense.get(n, shape), kind) for n, shape, kind in LAYOUT] + [
        ("routerw", (lm, e, C), "r"), ("expfcw", (lm, e, fh, C), "w"), ("expfcb", (lm, e, fh), "b"),
        ("expprojw", (lm, e, C, fh), "w"), ("expprojb", (lm, e, C), "b")]


def make_params(gen, moe=None):
    """Float32 parameters, drawn in layout order from one seeded generator."""
    out = {}
    for name, shape, kind in layout(moe):
        z = torch.randn(shape, generator=gen, dtype=torch.float32)
        if kind in ("w", "b"):
            p = 0.02 * z
        elif kind == "lnw":
            p = 1.0 + 0.1 * z
        elif kind == "r":
            p = 0.3 * z
        else:
            p = 0.1 * z
        out[name] = p.to(torch.float32)
    return out


def gpt_loss(p, tokens, targets, moe=None, slots=None):
    """Mean cross-entropy of the model on tokens (B, TN), plus with `moe` each MoE layer's balance and z
    losses (each sequence one routing group; its routing appended to `slots`); p holds float64 leaf tensors."""
    b, tn = tokens.shape
    hs = C // NH
    x = p["wte"][tokens] + p["wpe"][:tn].unsqueeze(0)
    extra = 0.0
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
        if moe is not None and l % moe["FREQ"] == 0:
            m = l // moe["FREQ"]
            w = {"router": p["routerw"][m], "fc": p["expfcw"][m], "fc_bias": p["expfcb"][m],
                 "proj": p["expprojw"][m], "proj_bias": p["expprojb"][m]}
            out, aux, z, s = moe_layer(h2.reshape(b * tn, C), w, tn, moe["E"], moe["K"], moe["CF"], moe["AUX"],
                                       moe["ZL"])
            x = x + out.view(b, tn, C)
            extra = extra + aux + z
            slots.append(s)
            continue
        d = l if moe is None else l - (l // moe["FREQ"] + 1)  # the dense layer's row of fcw etc.
        f = F.gelu(h2 @ p["fcw"][d].T + p["fcb"][d], approximate="tanh")
        x = x + (f @ p["fcprojw"][d].T + p["fcprojb"][d])
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    logits = x @ p["wte"].T
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="mean") + extra


# The MoE FFN layer (reference/model/moe.h) alone, for reference/model/moe_golden_test.cc: N tokens, E experts of
# hidden size FH, top-K routing by the router's softmax probabilities, capacity ceil(CF N K / E) with every
# first choice placed before any second choice, a dropped assignment contributing nothing; the output
# sum over kept assignments of p[t, e] * proj_e(gelu_tanh(fc_e(x_t))); the load-balancing loss
# AUX * E * sum_e f_e P_e (f_e: assignments to e before dropping over N K; P_e: mean probability) and the
# z-loss ZL * mean_t logsumexp(logits_t)^2; the loss sum(out * R) + aux + z.
MOE_MAGIC = b"DTBMOE01"
MOE_N, MOE_C, MOE_E, MOE_FH, MOE_K, MOE_CF, MOE_AUX, MOE_ZL = 24, 8, 4, 16, 2, 1.0, 0.1, 0.01
MOE_SEED = 20261203


def moe_layer(x, w, group, e_n, k_n, cf, aux_coeff, z_coeff):
    """(out, aux, z, slots) of the MoE layer on x (N, C) in float64, routing each group of `group` consecutive
    tokens on its own: capacity ceil(cf G K / E) per group (cf None: no dropping), first choices placed
    before second choices, an expert's rows numbered group after group; aux the mean over groups of
    aux_coeff E sum_e f_e P_e, z the z-loss over all tokens; slots (N, K): row in the expert's batch, -1 dropped."""
    n, c = x.shape
    logits = x @ w["router"].T
    probs = torch.softmax(logits, dim=-1)
    chosen = torch.topk(probs.detach(), k_n, dim=-1).indices  # random weights: no ties
    capacity = math.ceil(cf * group * k_n / e_n) if cf is not None else group * k_n
    rows_of = [0] * e_n
    slots = [[-1] * k_n for _ in range(n)]
    aux = 0.0
    for g0 in range(0, n, group):
        kept = [0] * e_n
        for i in range(k_n):
            for t in range(g0, g0 + group):
                e = int(chosen[t, i])
                if kept[e] < capacity:
                    kept[e] += 1
                    slots[t][i] = rows_of[e]
                    rows_of[e] += 1
        counts = torch.bincount(chosen[g0:g0 + group].reshape(-1), minlength=e_n).to(torch.float64)
        aux = aux + aux_coeff * e_n * torch.sum(counts / (group * k_n) * probs[g0:g0 + group].mean(dim=0))
    rows = []
    for t in range(n):
        acc = torch.zeros(c, dtype=torch.float64)
        for i in range(k_n):
            if slots[t][i] < 0:
                continue
            e = int(chosen[t, i])
            h = F.gelu(x[t] @ w["fc"][e].T + w["fc_bias"][e], approximate="tanh")
            acc = acc + probs[t, e] * (h @ w["proj"][e].T + w["proj_bias"][e])
        rows.append(acc)
    z = z_coeff * torch.mean(torch.logsumexp(logits, dim=-1) ** 2)
    return torch.stack(rows), aux / (n // group), z, slots


def moe_loss(x, R, w):
    """(loss, out, aux, z, slots) of the layer golden: one routing group of all MOE_N tokens."""
    out, aux, z, slots = moe_layer(x, w, MOE_N, MOE_E, MOE_K, MOE_CF, MOE_AUX, MOE_ZL)
    return torch.sum(out * R) + aux + z, out, aux, z, slots


def main_moe(out_path):
    """Writes the MoE layer's golden file: see reference/model/moe_golden_test.cc for its format."""
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


# The Llama golden (--llama, reference/model/testdata/llama_tiny.bin): the same batch through a Llama-style model,
# written from the math (Touvron et al. 2023; Hugging Face's LlamaForCausalLM), not from the C++: x = wte[tok]; per
# layer x += attproj(attn(rope(q), rope(k), v)) on rmsnorm1(x), with KV key/value heads each shared by NH/KV
# consecutive query heads, and x += down(silu(gate) * up) on rmsnorm2(x); rmsnormf; logits = x @ lmheadw^T (untied).
# Rotary embeddings in the rotate-half form: channel i of a head pairs with i + hs/2, angle p * THETA^(-2i/hs).
# The rows of qkvw are q (NH heads), then k (KV heads), then v (KV heads); fcw's are gate (F), then up (F).
LLAMA = {"L": 2, "C": 32, "NH": 4, "KV": 2, "T": 16, "V": 256, "F": 48, "THETA": 10000.0, "EPS": 1e-5}
MAGIC_LLAMA = b"DTBGOLD3"
LLAMA_SEED = 20261206


def llama_layout():
    """(name, shape, std or None for a norm weight) in reference/model/gpt.h's Llama order. Weights N(0, 0.1) (larger
    than an initialisation's 0.02, so that attention is far from uniform and the rotary angles matter); norm weights
    1 + 0.1 N(0, 1)."""
    c, l, v, f = LLAMA["C"], LLAMA["L"], LLAMA["V"], LLAMA["F"]
    hs = c // LLAMA["NH"]
    w = (LLAMA["NH"] + 2 * LLAMA["KV"]) * hs
    return [("wte", (v, c), 0.1), ("ln1w", (l, c), None), ("qkvw", (l, w, c), 0.1), ("attprojw", (l, c, c), 0.1),
            ("ln2w", (l, c), None), ("fcw", (l, 2 * f, c), 0.1), ("fcprojw", (l, c, f), 0.1), ("lnfw", (c,), None),
            ("lmheadw", (v, c), 0.1)]


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w


def rotary(x, theta):
    """x (b, heads, tn, hs) rotated by position (0..tn-1): x cos + rotate_half(x) sin, rotate_half(x) = (-x2, x1)."""
    tn, hs = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    angles = torch.arange(tn, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (tn, hs/2)
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1)
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1)
    x1, x2 = x[..., : hs // 2], x[..., hs // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def llama_loss(p, tokens, targets):
    """Mean cross-entropy of the Llama model on tokens (B, TN); p holds float64 leaf tensors."""
    b, tn = tokens.shape
    c, nh, kv, f, eps, theta = LLAMA["C"], LLAMA["NH"], LLAMA["KV"], LLAMA["F"], LLAMA["EPS"], LLAMA["THETA"]
    hs = c // nh
    x = p["wte"][tokens]
    causal = torch.ones(tn, tn, dtype=torch.bool).tril()
    for l in range(LLAMA["L"]):
        h = rms_norm(x, p["ln1w"][l], eps)
        qkv = h @ p["qkvw"][l].T
        q, k, v = qkv.split([nh * hs, kv * hs, kv * hs], dim=-1)
        q = rotary(q.view(b, tn, nh, hs).transpose(1, 2), theta)
        k = rotary(k.view(b, tn, kv, hs).transpose(1, 2), theta)
        v = v.view(b, tn, kv, hs).transpose(1, 2)
        k = k.repeat_interleave(nh // kv, dim=1)  # query head j uses key/value head j // (nh / kv)
        v = v.repeat_interleave(nh // kv, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        a = (att @ v).transpose(1, 2).reshape(b, tn, c)
        x = x + a @ p["attprojw"][l].T
        h2 = rms_norm(x, p["ln2w"][l], eps)
        gate, up = (h2 @ p["fcw"][l].T).split(f, dim=-1)
        x = x + (F.silu(gate) * up) @ p["fcprojw"][l].T
    x = rms_norm(x, p["lnfw"], eps)
    logits = x @ p["lmheadw"].T
    return F.cross_entropy(logits.reshape(-1, LLAMA["V"]), targets.reshape(-1), reduction="mean")


def main_llama(out_path, tokens, targets):
    """Writes the Llama golden file (format in the module docstring, magic DTBGOLD3)."""
    gen = torch.Generator().manual_seed(LLAMA_SEED)
    p32 = {}
    for name, shape, std in llama_layout():
        z = torch.randn(shape, generator=gen, dtype=torch.float32)
        p32[name] = (1.0 + 0.1 * z if std is None else std * z).to(torch.float32)
    p64 = {k: v.to(torch.float64).requires_grad_(True) for k, v in p32.items()}
    loss = llama_loss(p64, tokens, targets)
    loss.backward()
    m = LLAMA
    with open(out_path, "wb") as f:
        f.write(MAGIC_LLAMA)
        f.write(np.array([m["L"], m["C"], m["NH"], m["T"], m["V"], B, TN], dtype="<i4").tobytes())
        f.write(np.array([m["KV"], m["F"]], dtype="<i4").tobytes())
        f.write(np.array([m["THETA"], m["EPS"]], dtype="<f8").tobytes())
        f.write(tokens.numpy().astype("<i4").tobytes())
        f.write(targets.numpy().astype("<i4").tobytes())
        for name, _, _ in llama_layout():
            f.write(p32[name].numpy().astype("<f4").tobytes())
        f.write(np.array([loss.item()], dtype="<f8").tobytes())
        for name, _, _ in llama_layout():
            f.write(p64[name].grad.numpy().astype("<f8").tobytes())
    nparams = sum(int(np.prod(s)) for _, s, _ in llama_layout())
    print(f"wrote {out_path}: P={nparams} loss={loss.item():.17g}")


def main():
    torch.set_num_threads(1)  # one fixed summation order, so reruns are byte-identical
    testdata = os.path.normpath(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference", "model", "testdata"))
    if len(sys.argv) > 1 and sys.argv[1] == "--moe":
        return main_moe(sys.argv[2] if len(sys.argv) > 2 else os.path.join(testdata, "moe_layer.bin"))
    moe = GPT_MOE if len(sys.argv) > 1 and sys.argv[1] == "--gpt-moe" else None
    llama = len(sys.argv) > 1 and sys.argv[1] == "--llama"
    args = sys.argv[2:] if moe or llama else sys.argv[1:]
    out_path = args[0] if args else os.path.join(testdata, "llama_tiny.bin" if llama else
                                                 "gpt_moe.bin" if moe else "gpt_tiny.bin")
    assert len(TEXT) == B * (TN + 1)
    seqs = np.frombuffer(TEXT, dtype=np.uint8).astype(np.int64).reshape(B, TN + 1)
    tokens = torch.from_numpy(seqs[:, :TN].copy())
    targets = torch.from_numpy(seqs[:, 1:].copy())
    if llama:
        return main_llama(out_path, tokens, targets)

    gen = torch.Generator().manual_seed(SEED)
    p32 = make_params(gen, moe)
    # float32 -> float64 is exact, so the C++ models start from the same real numbers.
    p64 = {k: v.to(torch.float64).requires_grad_(True) for k, v in p32.items()}
    slots = []
    loss = gpt_loss(p64, tokens, targets, moe, slots)
    loss.backward()

    with open(out_path, "wb") as f:
        f.write(MAGIC_MOE if moe else MAGIC)
        f.write(np.array([L, C, NH, T, V, B, TN], dtype="<i4").tobytes())
        if moe:
            f.write(np.array([moe["E"], moe["K"], moe["FREQ"], moe["FH"]], dtype="<i4").tobytes())
            f.write(np.array([moe["CF"], moe["AUX"], moe["ZL"]], dtype="<f8").tobytes())
        f.write(tokens.numpy().astype("<i4").tobytes())
        f.write(targets.numpy().astype("<i4").tobytes())
        for name, _, _ in layout(moe):
            f.write(p32[name].numpy().astype("<f4").tobytes())
        f.write(np.array([loss.item()], dtype="<f8").tobytes())
        for name, _, _ in layout(moe):
            f.write(p64[name].grad.numpy().astype("<f8").tobytes())
        for s in slots:
            f.write(np.array(s, dtype="<i4").tobytes())
    nparams = sum(int(np.prod(s)) for _, s, _ in layout(moe))
    dropped = sum(v < 0 for s in slots for row in s for v in row)
    print(f"wrote {out_path}: P={nparams} loss={loss.item():.17g}" + (f", {dropped} assignments dropped" if moe else ""))


if __name__ == "__main__":
    main()
