#!/usr/bin/env bash
# `dtbench memory`: the ZeRO paper's four numbers (Fig. 1: 7.5B parameters, 64 ranks, K = 12:
# 120, 31.4, 16.6, 1.88 GB per rank), DeepSpeed's ZeRO-2 estimate for t5-3b, a planned layout
# whose JSON adds up, a Llama model with context parallelism, and bad input ending with one line on stderr and exit status 2.
# Usage: memory_cli_test.sh PATH/TO/dtbench
set -u
dtbench="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0; n=0

check() {  # check NAME COMMAND...: passes when COMMAND exits 0
  local name="$1"; shift
  n=$((n + 1))
  if "$@"; then echo "ok: $name"; else echo "FAIL: $name"; fails=$((fails + 1)); fi
}

"$dtbench" memory --params 7.5e9 --dp 64 --precision fp16 >"$tmp/zero.txt" 2>&1
"$dtbench" memory --params 7.5e9 --dp 64 --precision fp16 --json >"$tmp/zero.json" 2>&1
check "ZeRO Fig. 1 in JSON: 120, 31.4, 16.6, 1.88 GB" python3 - "$tmp/zero.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
got = [z["device_bytes"]["total"] / 1e9 for z in j["zero_stages"]]
assert got == [120.0, 31.40625, 16.640625, 1.875], got
assert ["%.0f" % got[0], "%.1f" % got[1], "%.1f" % got[2], "%.2f" % got[3]] == ["120", "31.4", "16.6", "1.88"]
PY
check "ZeRO Fig. 1 in the table" python3 - "$tmp/zero.txt" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l[:1] in "0123" and "(" in l.split()[1]]
assert [r[6] for r in rows] == ["120", "31.4", "16.6", "1.88"], rows
PY

"$dtbench" memory --params 2851598336 --dp 8 >"$tmp/t5.txt" 2>&1
check "DeepSpeed ZeRO-2, t5-3b on 8 GPUs: 127.48GB | 5.31GB offloaded, 15.93GB in the docs' formula" \
  grep -q "127.48GB |   5.31GB | ZeRO-2 offload_optimizer=cpu" "$tmp/t5.txt"
check "DeepSpeed docs' 15.93GB" grep -q "127.48GB |  15.93GB | ZeRO-2 offload_optimizer=none  (the docs'" "$tmp/t5.txt"

"$dtbench" memory --model 10b --tp 2 --pp 2 --dp 2 --json >"$tmp/10b.json" 2>&1
check "10b on TP2 x PP2 x DP2: categories add up, 16 B/param, 1F1B sets 2 and 1" python3 - "$tmp/10b.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert len(j["stages"]) == 2
for s in j["stages"]:
    d = s["device_bytes"]
    assert d["total"] == sum(v for k, v in d.items() if k != "total")
    states = d["param"] + d["grad"] + d["master_param"] + d["optimizer_state"]
    assert states == 16 * s["params"], (states, s["params"])
    assert d["master_param"] == 0 and s["host_bytes"]["total"] == 0
assert [s["activation_sets"] for s in j["stages"]] == [[2], [1]]
assert j["busiest_stage"] == 0
PY

"$dtbench" memory --model gpt2-124m >"$tmp/gpt2.txt" 2>&1
check "gpt2-124m has 124,439,808 parameters" grep -q "124,439,808 parameters" "$tmp/gpt2.txt"
"$dtbench" memory --help >"$tmp/help.txt" 2>&1
check "--help lists gpt3-175b with its count" grep -q "gpt3-175b.*174,604,259,328 parameters" "$tmp/help.txt"
# The Llama 3 models (Dubey et al. 2024, Table 3): their counts derived here from the shapes — the
# embedding and the untied head 2 V C, per layer q and the projection 2 C^2, k and v 2 KV hs C,
# SwiGLU's three C x F, two RMSNorm weights; the final RMSNorm — printed by --help, and within
# 0.1 % of the published 8.03e9, 70.6e9 and 405.9e9 (rounded to 3-4 digits: 0.06 % at most).
llama_counts=$(python3 - <<'PY'
V, KV = 128256, 8
for name, L, C, NH, F, published in (("llama3-8b", 32, 4096, 32, 14336, 8.03e9),
                                     ("llama3-70b", 80, 8192, 64, 28672, 70.6e9),
                                     ("llama3-405b", 126, 16384, 128, 53248, 405.9e9)):
    hs = C // NH
    n = 2 * V * C + L * (2 * C * C + 2 * KV * hs * C + 3 * C * F + 2 * C) + C
    assert abs(n - published) <= 1e-3 * published, (name, n, published)
    print(f"{name}.*KV8 F{F} T131072 V128256: {n:,} parameters")
PY
)
check "the three Llama counts derived and within 0.1 % of the published" test "$(grep -c parameters <<<"$llama_counts")" -eq 3
while IFS= read -r want; do
  check "--help lists ${want%%.*} with its count" grep -q "$want" "$tmp/help.txt"
done <<<"$llama_counts"

# A named model's plan sequence: llama3-8b plans 8192 tokens (its T is 131072), as `dtbench plan` does.
"$dtbench" memory --model llama3-8b --tp 8 --json >"$tmp/l8b.json"
"$dtbench" memory --model llama3-8b --tp 8 --seq 4096 --json >"$tmp/l8b-4k.json"
check "llama3-8b plans its 8192-token sequence unless --seq is given" python3 - "$tmp/l8b.json" "$tmp/l8b-4k.json" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["layout"]["seq_len"] == 8192 and b["layout"]["seq_len"] == 4096, (a["layout"], b["layout"])
PY

# An MoE model (harness/memory_moe.cc): its counts, and model states that follow the total parameters
# on one rank (95.3 GB, a dense 5.95B model's) and the active ones at EP 8 = E / k (19.1 GB).
"$dtbench" memory --model moe-6b --json >"$tmp/moe1.json"
"$dtbench" memory --model moe-6b --dp 8 --expert-parallel 8 --precision bf16 --json >"$tmp/moe8.json"
check "moe-6b: 5,953,607,680 parameters, 1,193,353,216 active; 95.3 GB on one rank, 19.1 GB per rank at EP 8" \
  python3 - "$tmp/moe1.json" "$tmp/moe8.json" <<'PY'
import json, sys
one, ep8 = (json.load(open(f)) for f in sys.argv[1:])
assert one["params"]["total"] == 5953607680 and one["params"]["active"] == 1193353216, one["params"]
assert abs(one["per_rank_bytes"]["total"] - 16 * 5953607680) < 1, one["per_rank_bytes"]
assert one["per_rank_bytes"]["total"] == one["dense_total_bytes"]["total"]
assert abs(ep8["per_rank_bytes"]["total"] - 16 * 1193353216) < 1, ep8["per_rank_bytes"]
assert [r["holds"] for r in one["rules_of_thumb"]] == [False, True] and ep8["rules_of_thumb"][0]["holds"]
PY

# A Llama model by shape (--arch llama --kv-heads --ffn-hidden) and context parallelism (--cp): the
# JSON adds up; CP2 x DP2 at ZeRO 3 shards as DP4 does (over the dp cp ranks) and keeps fewer
# activation bytes (half the rows); GPT-2's formulas (Korthikanti, Megatron) are not compared for Llama.
llama=(--layers 8 --hidden 64 --heads 4 --vocab 256 --seq 32 --arch llama --kv-heads 2 --ffn-hidden 128)
"$dtbench" memory "${llama[@]}" --tp 2 --cp 2 --dp 2 --zero-stage 3 --json >"$tmp/llama_cp.json"
"$dtbench" memory "${llama[@]}" --tp 2 --dp 4 --zero-stage 3 --json >"$tmp/llama_dp.json"
"$dtbench" memory "${llama[@]}" --tp 4 --cp 2 --cp-comm-type all_gather --json >"$tmp/llama_tp4.json"
check "Llama by shape with --cp: categories add up, shards over DP x CP, half the rows, no GPT-2 formulas" \
  python3 - "$tmp/llama_cp.json" "$tmp/llama_dp.json" "$tmp/llama_tp4.json" <<'PY'
import json, sys
cp, dp, tp4 = (json.load(open(f)) for f in sys.argv[1:])
assert cp["model"]["arch"] == "llama" and cp["model"]["num_kv_heads"] == 2 and cp["model"]["ffn_hidden_size"] == 128
assert cp["layout"]["cp"] == 2 and cp["layout"]["world"] == 8 and cp["layout"]["seq_len_per_rank"] == 16, cp["layout"]
for j in (cp, dp, tp4):
    for s in j["stages"]:
        d = s["device_bytes"]
        assert d["total"] == sum(v for k, v in d.items() if k != "total")
    assert "korthikanti_layer_activation_bytes" not in j and "megatron_weight_and_optimizer_bytes" not in j
s, t = cp["stages"][0], dp["stages"][0]
assert s["shard_params"] == t["shard_params"] and s["device_bytes"]["param"] == t["device_bytes"]["param"], (s, t)
assert s["device_bytes"]["activation"] < t["device_bytes"]["activation"]
assert s["cp_comm_buffer_bytes"] == 4 * 16 * 2 * 1 * 16 * 4, s  # p2p: 4 blocks of B Tl 2 KVl hs fp32
assert t["cp_comm_buffer_bytes"] == 0 and t["transient_workspace_bytes"] == 0
u = tp4["stages"][0]  # tp 4 > 2 KV heads: each rank holds its one shared KV head; all_gather: 2 + 2 cp blocks
assert u["cp_comm_buffer_bytes"] == 6 * 16 * 2 * 1 * 16 * 4, u
PY

expect_error() {  # expect_error WANTED_SUBSTRING ARGS...
  local want="$1"; shift
  n=$((n + 1))
  "$dtbench" memory "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines
  lines=$(wc -l <"$tmp/err")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL: dtbench memory $* -> exit $rc, $lines stderr lines, wanted '$want':"; cat "$tmp/err"
    fails=$((fails + 1))
  else
    echo "ok: dtbench memory $* -> $(cat "$tmp/err")"
  fi
}
expect_error "unknown model 'gpt2-125m' (did you mean gpt2-124m?)" --model gpt2-125m
expect_error "heads are not divisible by tensor_parallel = 3" --model 10b --tp 3
expect_error "layers are not divisible by pipeline_parallel (3)" --model 10b --pp 3
expect_error "--zero-stage must be 0-3, got 4" --model 10b --zero-stage 4
expect_error "offload_optimizer cpu needs ZeRO stage 1, 2 or 3" --model 10b --offload-optimizer cpu
expect_error "--layers must be in [1, 1048576], got -2" --layers -2 --hidden 64 --heads 4
expect_error "--micro-batch-size must be in [1, 65536], got 0" --model 1b --micro-batch-size 0
# Past the planner's bounds a plan only allocates (2e9 micro-batches threw bad_alloc, exit 1).
expect_error "--micro-batches must be in [1, 65536], got 2000000000" --model 1b --micro-batches 2000000000 --pp 2
expect_error "--micro-batch-size must be in [1, 65536], got 100000000" --model 1b --micro-batch-size 100000000
expect_error "seq_len 4096 is outside [1, T = 2048]" --model 1b --seq 4096
expect_error "unknown precision 'fp8'" --model 1b --precision fp8
expect_error "unknown recompute 'some'" --model 1b --recompute some
expect_error "give --model NAME, or --layers, --hidden and --heads" --hidden 64
expect_error "not both" --model 1b --layers 4
expect_error "--params must be a number in [1, 1e18], got -5" --params -5
expect_error "--params must be a number in [1, 1e18], got inf" --params inf
expect_error "--largest-layer-params must be in [1, --params], got -1" --params 7.5e9 --largest-layer-params -1 --zero-stage 3 --dp 8
expect_error "give a model for --tp/--pp" --params 1e9 --tp 2
expect_error "needs micro_batches (3) to be a multiple of pipeline_parallel (2)" --model 1b --pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 3
expect_error "C = 65 is not divisible by NH = 4" --layers 2 --hidden 65 --heads 4
expect_error "--expert-parallel 3 does not divide --num-experts 64" --model moe-6b --expert-parallel 3 --dp 3
expect_error "--expert-parallel 4 does not divide the data-parallel size --dp 2" --model moe-6b --expert-parallel 4 --dp 2
expect_error "moe_router_topk = 9 is outside [1, num_experts = 8]" --model 1b --num-experts 8 --moe-router-topk 9
expect_error "--expert-parallel is given but the model has no experts" --model 1b --expert-parallel 2
expect_error "--recompute does not apply to an MoE model's plan" --model moe-6b --recompute full
expect_error "--params and --num-experts exclude each other" --params 7.5e9 --num-experts 8
expect_error "--num-experts must be <= 65536, got 70000" --model 1b --num-experts 70000
expect_error "--kv-heads is a Llama option but --arch is \"gpt2\"" --layers 2 --hidden 64 --heads 4 --kv-heads 2
expect_error "--arch: 'mistral' is not \"gpt2\" or \"llama\"" --layers 2 --hidden 64 --heads 4 --arch mistral
expect_error "not both" --model 1b --arch llama
expect_error "seq_len 30 is not divisible by 2 x context_parallel = 4" --model 1b --cp 2 --seq 30
expect_error "--cp-comm-type goes with --cp > 1" --model 1b --cp-comm-type all_gather
expect_error "context_parallel = 2 with schedule zb-h1 is not supported yet" --model 1b --cp 2 --pp 2 --schedule zb-h1
expect_error "give a model for --tp/--pp/--cp" --params 1e9 --cp 2
expect_error "--cp must be in [1," --model 1b --cp 0

echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
