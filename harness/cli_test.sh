#!/usr/bin/env bash
# Bad input on the command line or in a config ends with exactly one line on stderr,
# naming the problem, and exit status 2 — before anything is measured.
# Usage: cli_test.sh PATH/TO/dtbench
set -u
dtbench="$1"
tmp=$(mktemp -d)
src=$(cd "$(dirname "$0")/.." && pwd)
trap 'rm -rf "$tmp"' EXIT
fails=0; n=0

# expect_error WANTED_SUBSTRING ARGS...
expect_error() {
  local want="$1"; shift
  n=$((n + 1))
  "$dtbench" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines
  lines=$(wc -l <"$tmp/err")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL: dtbench $* -> exit $rc, $lines stderr lines, wanted '$want':"; cat "$tmp/err"
    fails=$((fails + 1))
  else
    echo "ok: dtbench $* -> $(cat "$tmp/err")"
  fi
}

printf '{"name": "x", "trian": {}}' >"$tmp/unknown_key.json"
printf '{"name": "x", "train": {"stpes": 3}}' >"$tmp/unknown_nested.json"
printf '{"name": "x", "seed": ' >"$tmp/malformed.json"
printf '{"train": {"steps": "ten"}}' >"$tmp/wrong_type.json"
printf '{"train": {"steps": 2.5}}' >"$tmp/float_for_int.json"
printf '{"train": {"steps": 0}}' >"$tmp/zero_steps.json"
printf '{"train": {"global_batch": 6, "micro_batches": 4}}' >"$tmp/no_divide.json"
printf '{"model": {"C": 30, "NH": 4}}' >"$tmp/heads.json"
printf '{"train": {"seq_len": 65}}' >"$tmp/seq_len.json"
printf '{"collectives": {"ops": ["all_reduce", "alltoall_nosuch"]}}' >"$tmp/bad_op.json"
printf '{"suites": []}' >"$tmp/no_suites.json"
printf '[1, 2]' >"$tmp/not_object.json"
printf 'x' >"$tmp/tiny.txt"
: >"$tmp/empty.txt"
printf '{"model": {"V": 50}}' >"$tmp/small_vocab.json"
printf '{"model": {"L": 1000, "C": 65536, "NH": 1}}' >"$tmp/huge_model.json"
printf '{"model": {"C": 4294967328}}' >"$tmp/wraps.json"
printf '{"seed": 18446744073709551615}' >"$tmp/big_seed.json"
printf '{"train": {"beta2": -3}}' >"$tmp/beta.json"
printf '{"comm_timeout_s": 0}' >"$tmp/comm_timeout.json"
printf '{"suites": ["train"], "train": {"steps": 20, "checkpoint_every": 5}}' >"$tmp/ckpt_no_dir.json"
printf '{"suites": ["train"], "train": {"resume_from": "latest"}}' >"$tmp/resume_no_dir.json"
printf '{"suites": ["train"], "train": {"checkpoint_dir": "%s/ck", "checkpoint_every": -1}}' "$tmp" >"$tmp/ckpt_every.json"
printf '{"suites": ["train"], "train": {"resume_from": "%s/nonexistent"}}' "$tmp" >"$tmp/resume_missing.json"
printf '{"suites": ["train"], "train": {"steps": 10, "checkpoint_every": 5, "checkpoint_dir": "/proc/dtbench-nope"}}' >"$tmp/ckpt_unwritable.json"
mkdir -p "$tmp/out_latest_dir/latest.json"
# Two f64 buffers of 0.6 x RAM do not fit (0.8 x RAM is the limit), if that size is
# within MPI's int counts (RAM up to 28 GiB).
ram=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) * 1024 ))
huge=$(( ram * 6 / 10 / 8 * 8 ))
printf '{"collectives": {"dtype": "f64", "min_bytes": %d, "max_bytes": %d}}' "$huge" "$huge" >"$tmp/huge_msg.json"
printf '{"name": "../x"}' >"$tmp/bad_name.json"
# Layouts that cannot work (the conformance suite validates each layout against its own
# size, so they are refused here on one rank; the train suite's against the world).
printf '{"train": {"tensor_parallel": 2}}' >"$tmp/tp_world.json"
printf '{"train": {"tensor_parallel": 2, "pipeline_parallel": 2, "data_parallel": 3}}' >"$tmp/product.json"
printf '{"train": {"schedule": "zigzag"}}' >"$tmp/schedule.json"
printf '{"train": {"virtual_stages": 2}}' >"$tmp/v_without_interleaved.json"
printf '{"conformance": {"model": {"L": 4, "C": 48, "NH": 6, "T": 32, "V": 256}, "layouts": ["TP4"]}}' >"$tmp/heads_tp.json"
printf '{"conformance": {"model": {"L": 5, "C": 64, "NH": 4, "T": 32, "V": 256}, "layouts": ["PP2"]}}' >"$tmp/layers_pp.json"
printf '{"conformance": {"global_batch": 10, "micro_batches": 1, "layouts": ["DP4"]}}' >"$tmp/batch_dp.json"
printf '{"conformance": {"micro_batches": 2, "layouts": ["PP4:interleaved:v2"]}}' >"$tmp/interleaved_m.json"
printf '{"conformance": {"model": {"L": 4, "C": 64, "NH": 4, "T": 32, "V": 258}, "layouts": ["TP4"]}}' >"$tmp/vocab_tp.json"
printf '{"conformance": {"layouts": ["PP4:interleaved:v3"]}}' >"$tmp/layers_v.json"
printf '{"conformance": {"layouts": ["TP2xQP2"]}}' >"$tmp/bad_layout.json"
printf '{"train": {"tensor_parallel": 65536, "pipeline_parallel": 65536}}' >"$tmp/tp_pp_overflow.json"
printf '{"train": {"data_parallel": 1048576}}' >"$tmp/world_overflow.json"
printf '{"conformance": {"layouts": ["DP4096", "TP2"], "micro_batches": 1048576, "global_batch": 1048576}}' >"$tmp/dp_mb_overflow.json"
printf '{"conformance": {"layouts": ["TP2\\nPP2"]}}' >"$tmp/newline_layout.json"
printf '{"conformance": {"layouts": ["TP2", "tp2"]}}' >"$tmp/dup_layout.json"
printf '{"backend": "cuda", "train": {"matmul_precision": "bf16"}}' >"$tmp/cuda_bf16.json"
printf '{"train": {"recompute": "partial"}}' >"$tmp/recompute.json"
printf '{"conformance": {"layouts": ["TP2:full:selective"]}}' >"$tmp/recompute_twice.json"
printf '{"train": {"precision": "fp4"}}' >"$tmp/precision.json"
# FP8 (docs/fp8.md): its section without precision fp8, a delayed key with another recipe, an unknown
# recipe, a GPU backend (FP8 GEMMs on the CPU only), the sweep's precision.
printf '{"train": {"fp8": {"recipe": "current"}}}' >"$tmp/fp8_without.json"
printf '{"train": {"precision": "fp8", "fp8": {"recipe": "current", "margin": 1}}}' >"$tmp/fp8_margin.json"
printf '{"train": {"precision": "fp8", "fp8": {"recipe": "mxfp4"}}}' >"$tmp/fp8_recipe.json"
printf '{"train": {"precision": "fp8", "fp8": {"recipe": "current", "amax_history": 4}}}' >"$tmp/fp8_key.json"
printf '{"backend": "cuda", "train": {"precision": "fp8"}}' >"$tmp/fp8_cuda.json"
printf '{"suites": ["sweep"], "sweep": {"precision": "fp8"}}' >"$tmp/fp8_sweep.json"
printf '{"kernels": {"filter": ""}}' >"$tmp/kernels_empty.json"
printf '{"train": {"precision": "bf16", "communication_data_type": "fp16"}}' >"$tmp/comm_dtype.json"
printf '{"train": {"loss_scale": "static"}}' >"$tmp/loss_scale.json"
printf '{"conformance": {"precisions": ["bf16", "bf16"]}}' >"$tmp/precisions_twice.json"
printf '{"conformance": {"precisions": []}}' >"$tmp/precisions_empty.json"
printf '{"backend": "cuda", "suites": ["precision"]}' >"$tmp/precision_cuda.json"
python3 -c 'print("{\"train\": {\"steps\": " + "[" * 100000 + "]" * 100000 + "}}")' >"$tmp/deep.json"
ln -s loop2 "$tmp/loop1"; ln -s loop1 "$tmp/loop2"
mkfifo "$tmp/fifo"

expect_error "unknown suite 'nosuch'" run --suites nosuch
expect_error "did you mean 'train'" run --suites trian
expect_error "--bogus" run --bogus
expect_error "dtbench: error:" nosuchcommand
expect_error "dtbench: error:" ""
expect_error "unknown config key 'trian' (did you mean 'train'?)" run --config "$tmp/unknown_key.json"
expect_error "unknown config key 'train.stpes' (did you mean 'steps'?)" run --config "$tmp/unknown_nested.json"
expect_error "malformed JSON" run --config "$tmp/malformed.json"
printf '{"train": {"steps": 3}, "train": {"lr": 0.5}}' >"$tmp/dup_key.json"
expect_error "key 'train' appears twice in one object" run --config "$tmp/dup_key.json"
printf '{"train": {"sequence_parallel": true, "sequence_parallel": false}}' >"$tmp/dup_nested.json"
expect_error "key 'train.sequence_parallel' appears twice in one object" run --config "$tmp/dup_nested.json"
expect_error "--allow-changed: 'steps' is not a recipe key" run --allow-changed steps
expect_error "--allow-changed: this run resumes nothing" run --config smoke --allow-changed lr --suites collectives
printf '{"model": {"L": 4, "C": 64, "NH": 4, "T": 64, "V": 256}, "train": {"pipeline_parallel": 1, "pipeline_layers": [3, 1]}}' >"$tmp/layers.json"
expect_error "pipeline_layers 3+1 has 2 entries, not one per virtual stage" run --suites train --config "$tmp/layers.json"
expect_error "config file not found" run --config "$tmp/missing.json"
expect_error "unknown config 'nosuchconfig'" run --config nosuchconfig
expect_error "'train.steps' must be an integer" run --config "$tmp/wrong_type.json"
expect_error "'train.steps' must be an integer" run --config "$tmp/float_for_int.json"
expect_error "train.steps = 0 is out of range" run --config "$tmp/zero_steps.json"
expect_error "not divisible by data_parallel" run --config "$tmp/no_divide.json"
expect_error "not divisible by NH" run --config "$tmp/heads.json"
expect_error "train.seq_len = 65" run --config "$tmp/seq_len.json"
expect_error "alltoall_nosuch" run --config "$tmp/bad_op.json"
expect_error "no suites selected" run --config "$tmp/no_suites.json"
expect_error "must be an object" run --config "$tmp/not_object.json"
expect_error "is a directory" run --config "$tmp"
# sweep.max_mape: a fraction (15 meant as 15 % is refused), and refused before anything runs where
# fewer than 2 layouts are modelled (one rank: DP1 alone; the check was silently never made).
printf '{"suites": ["sweep"], "sweep": {"steps": 4, "max_mape": 15}}' >"$tmp/mape_pct.json"
expect_error "sweep.max_mape = 15 is out of range [0.0, 10.0]" run --config "$tmp/mape_pct.json"
printf '{"suites": ["sweep"], "sweep": {"steps": 4, "max_mape": 0.3}}' >"$tmp/mape_one.json"
expect_error "sweep.max_mape: the step-time model covers 1 of the sweep's 1 layouts here, and the error needs 2 or more" \
  run --config "$tmp/mape_one.json"
printf '{"suites": ["sweep"], "sweep": {"steps": 4, "max_mape": "0.3"}}' >"$tmp/mape_str.json"
expect_error "sweep.max_mape" run --config "$tmp/mape_str.json"
expect_error "data file not found" run --data "$tmp/missing.txt"
expect_error "bytes; at least" run --data "$tmp/tiny.txt"
expect_error "bytes; at least" run --data "$tmp/empty.txt"
expect_error "output directory is not writable" run --output-dir /proc/dtbench-nope
expect_error "model.V = 50 is out of range [256," run --config "$tmp/small_vocab.json"
expect_error "more than this machine's memory allows" run --config "$tmp/huge_model.json"
expect_error "bytes available to the run (80% of" run --config "$tmp/huge_model.json"
expect_error "; --force runs it anyway" run --config "$tmp/huge_model.json"
expect_error "model.C = 4294967328 is out of range" run --config "$tmp/wraps.json"
expect_error "'seed' = 18446744073709551615 is out of range" run --config "$tmp/big_seed.json"
expect_error "train.beta2 = -3 is out of range" run --config "$tmp/beta.json"
expect_error "comm_timeout_s = 0 is out of range [1.0," run --config "$tmp/comm_timeout.json"
expect_error "train.checkpoint_every = 5 needs train.checkpoint_dir (where to save)" run --config "$tmp/ckpt_no_dir.json"
expect_error "train.resume_from \"latest\" needs train.checkpoint_dir (where to look)" run --config "$tmp/resume_no_dir.json"
expect_error "train.checkpoint_every = -1 is out of range [0, 1000000]" run --config "$tmp/ckpt_every.json"
expect_error "nonexistent' is not a checkpoint step directory (no such directory)" run --config "$tmp/resume_missing.json"
printf '{"suites": ["train"], "train": {"resume_from": "%s/tiny.txt"}}' "$tmp" >"$tmp/resume_file.json"
expect_error "tiny.txt' is not a checkpoint step directory (not a directory)" run --config "$tmp/resume_file.json"
# An interval past the run's steps would never save (the run went through, saving nothing).
printf '{"suites": ["train"], "train": {"steps": 6, "checkpoint_every": 100, "checkpoint_dir": "%s/never"}}' "$tmp" >"$tmp/ckpt_never.json"
expect_error "train.checkpoint_every = 100 exceeds train.steps = 6: no checkpoint would be saved" run --config "$tmp/ckpt_never.json"
expect_error "train.checkpoint_dir is not writable: '/proc/dtbench-nope'" run --config "$tmp/ckpt_unwritable.json"
mkdir -p "$tmp/held/step-5" && echo 5 >"$tmp/held/latest"
printf '{"suites": ["train"], "train": {"steps": 10, "checkpoint_every": 5, "checkpoint_dir": "%s/held"}}' "$tmp" >"$tmp/ckpt_held.json"
expect_error "holds an earlier run's checkpoints (latest $tmp/held/step-5); a fresh run would overwrite them" run --config "$tmp/ckpt_held.json"
# A checkpoint damaged after its manifest was written: refused as the train suite loads it
# (every rank agrees on the message), exit 2, the report kept with the suite's error.
printf '{"suites": ["train"], "train": {"steps": 2, "checkpoint_every": 1, "checkpoint_dir": "%s/dmg", "references": false}}' "$tmp" >"$tmp/ckpt_save.json"
printf '{"suites": ["train"], "train": {"steps": 4, "resume_from": "latest", "checkpoint_dir": "%s/dmg", "references": false}}' "$tmp" >"$tmp/ckpt_load.json"
"$dtbench" run --config "$tmp/ckpt_save.json" --output-dir "$tmp/dmg_out" >/dev/null 2>&1
/usr/bin/python3 -c "import sys; f = open(sys.argv[1], 'r+b'); f.seek(-100, 2); b = f.read(1); f.seek(-100, 2); f.write(bytes([b[0] ^ 16]))" "$tmp/dmg/step-2/rank-0.bin"
expect_error "rank-0.bin: checksum mismatch" run --config "$tmp/ckpt_load.json" --output-dir "$tmp/dmg_out"
# A key of the manifest's layout this build does not read: refused before anything runs, as the model's are.
/usr/bin/python3 -c "import json, sys; m = json.load(open(sys.argv[1])); m['layout']['tensor_paralel'] = 2; json.dump(m, open(sys.argv[1], 'w'))" "$tmp/dmg/step-1/manifest.json"
printf '{"suites": ["train"], "train": {"steps": 4, "resume_from": "%s/dmg/step-1", "references": false}}' "$tmp" >"$tmp/ckpt_layout_key.json"
expect_error "step-1: manifest.json's layout has the unknown key 'tensor_paralel' (a layout holds tp, dp, pp," run --config "$tmp/ckpt_layout_key.json"
printf '{"suites": ["checkpoint"], "checkpoint": {"save_interval": -1}}' >"$tmp/cks_interval.json"
printf '{"suites": ["checkpoint"], "checkpoint": {"mtbf_hours": 0}}' >"$tmp/cks_mtbf.json"
printf '{"suites": ["checkpoint"], "checkpoint": {"steps": 4, "save_interval": 4}}' >"$tmp/cks_no_step_left.json"
printf '{"suites": ["checkpoint"], "checkpoint": {"checkpoint_dir": "%s/no-such-dir"}}' "$tmp" >"$tmp/cks_missing.json"
printf '{"suites": ["checkpoint"], "checkpoint": {"checkpoint_dir": "%s/cks_interval.json"}}' "$tmp" >"$tmp/cks_file.json"
printf '{"suites": ["checkpoint"], "checkpoint": {"checkpoint_dir": "/proc"}}' >"$tmp/cks_unwritable.json"
expect_error "checkpoint.save_interval = -1 is out of range [1, 7]" run --config "$tmp/cks_interval.json"
expect_error "checkpoint.mtbf_hours = 0 is out of range" run --config "$tmp/cks_mtbf.json"
expect_error "checkpoint.save_interval = 4 is out of range [1, 3]" run --config "$tmp/cks_no_step_left.json"
# The comm_efficiency suite's methods and emulated nodes (docs/comm-efficiency.md).
ce() { printf '{"suites": ["comm_efficiency"], "comm_efficiency": %s}' "$2" >"$tmp/ce_$1.json"; }
ce stale0 '{"methods": ["sync", "stale0"]}'
ce unknown '{"methods": ["sync", "gossip"]}'
ce first '{"methods": ["stale1", "sync"]}'
ce twice '{"methods": ["sync", "local4", "local4"]}'
ce local3 '{"methods": ["sync", "local3"], "steps": 40}'
ce slow0 '{"slow_link_gbps": 0}'
expect_error "comm_efficiency.methods: 'stale0': 0 is below 1" run --config "$tmp/ce_stale0.json"
expect_error "comm_efficiency.methods: 'gossip' is not sync, hierarchical, staleK[:dc] or localH" run --config "$tmp/ce_unknown.json"
expect_error "comm_efficiency.methods: the first must be sync" run --config "$tmp/ce_first.json"
expect_error "comm_efficiency.methods: 'local4' is listed twice" run --config "$tmp/ce_twice.json"
expect_error "comm_efficiency.steps = 40 is not a multiple of local3's 3 local steps" run --config "$tmp/ce_local3.json"
expect_error "comm_efficiency.slow_link_gbps = 0 is out of range" run --config "$tmp/ce_slow0.json"
expect_error "comm_efficiency.ranks_per_node = 2 must divide the 1 ranks into 2 or more nodes" run --suites comm_efficiency
expect_error "checkpoint.checkpoint_dir: '$tmp/no-such-dir' does not exist" run --config "$tmp/cks_missing.json"
expect_error "checkpoint.checkpoint_dir: '$tmp/cks_interval.json' is not a directory" run --config "$tmp/cks_file.json"
expect_error "checkpoint.checkpoint_dir is not writable: '/proc'" run --config "$tmp/cks_unwritable.json"
expect_error "latest.json exists and is not a regular file" run --config smoke --output-dir "$tmp/out_latest_dir"
expect_error "--run-id 'latest' is reserved" run --config smoke --run-id latest
# A report path that is the run's own config file: refused before it is overwritten (and kept).
mkdir -p "$tmp/self_dir" && cp "$src/harness/configs/smoke.json" "$tmp/self_dir/self.json"
expect_error "report path $tmp/self_dir/self.json is the config file" run --config "$tmp/self_dir/self.json" --output-dir "$tmp/self_dir" --run-id self
cmp -s "$src/harness/configs/smoke.json" "$tmp/self_dir/self.json" || { echo "FAIL: the config file was changed"; fails=$((fails + 1)); }
if [ "$huge" -le $(( 2147483647 * 8 )) ]; then
  expect_error "more than this machine's memory" run --config "$tmp/huge_msg.json"
else
  echo "not run: the message-size memory check (this machine has over 28 GiB)"
fi
expect_error "config key 'name' '../x' must be" run --config "$tmp/bad_name.json"
expect_error "nests deeper than 64 levels" run --config "$tmp/deep.json"
expect_error "config file not found" run --config "$tmp/loop1"
expect_error "not a regular file" run --config "$tmp/fifo"
expect_error "not a regular file" run --data "$tmp/fifo"
expect_error "not a regular file" run --data /dev/zero
expect_error "is not a regular file" run --data "$tmp"
expect_error "--run-id 'a/b' must be" run --run-id a/b
expect_error "--run-id '..' must be" run --run-id ..
expect_error "--suites is empty" run --suites ""
expect_error "--data is empty" run --data ""
expect_error "has an empty suite name" run --suites train,
expect_error "has an empty suite name" run --suites ,
expect_error "train: tensor_parallel (2) x pipeline_parallel (1) = 2 exceeds the world size 1" run --config "$tmp/tp_world.json"
expect_error "train: tensor_parallel (2) x pipeline_parallel (2) = 4 exceeds the world size 1" run --config "$tmp/product.json"
expect_error "train: unknown schedule 'zigzag' (gpipe, 1f1b, interleaved, zb-h1)" run --config "$tmp/schedule.json"
expect_error "virtual_stages = 2 needs schedule \"interleaved\"" run --config "$tmp/v_without_interleaved.json"
expect_error "'TP4': model.NH = 6 heads are not divisible by tensor_parallel = 4" run --suites conformance --config "$tmp/heads_tp.json"
expect_error "'PP2': model.L = 5 layers are not divisible by pipeline_parallel (2) x virtual_stages (1)" run --suites conformance --config "$tmp/layers_pp.json"
expect_error "'DP4': global batch 10 is not divisible by data_parallel (4) x micro_batches (1)" run --suites conformance --config "$tmp/batch_dp.json"
expect_error "needs micro_batches (2) to be a multiple of pipeline_parallel (4)" run --suites conformance --config "$tmp/interleaved_m.json"
expect_error "model.V = 258 (vocabulary) is not divisible by tensor_parallel = 4" run --suites conformance --config "$tmp/vocab_tp.json"
expect_error "model.L = 8 layers are not divisible by pipeline_parallel (4) x virtual_stages (3)" run --suites conformance --config "$tmp/layers_v.json"
expect_error "conformance: no layout fits 1 rank(s) (the smallest needs 2)" run --suites conformance
expect_error "train: tensor_parallel (65536) x pipeline_parallel (65536) = 4294967296 exceeds the world size 1" run --config "$tmp/tp_pp_overflow.json"
expect_error "train: tensor_parallel (1) x data_parallel (1048576) x pipeline_parallel (1) = 1048576 is not the world size 1" run --config "$tmp/world_overflow.json"
expect_error "global batch 1048576 is not divisible by data_parallel (4096) x micro_batches (1048576)" run --suites conformance --config "$tmp/dp_mb_overflow.json"
expect_error "conformance.layouts: 'TP2?PP2'" run --suites conformance --config "$tmp/newline_layout.json"
expect_error "conformance.layouts: 'tp2' is listed twice" run --suites conformance --config "$tmp/dup_layout.json"
expect_error "train.matmul_precision: the cpu backend computes in fp32 only, not bf16" run --config "$tmp/cuda_bf16.json" --backend cpu
expect_error "train.recompute: 'partial' is not none, selective or full" run --config "$tmp/recompute.json"
expect_error "conformance.layouts: 'TP2:full:selective' repeats an option ('selective')" run --suites conformance --config "$tmp/recompute_twice.json"
expect_error "train.precision: 'fp4' is not fp32, bf16, fp16 or fp8" run --config "$tmp/precision.json"
expect_error "config key 'train.fp8' is set but train.precision is \"fp32\" (set it to \"fp8\")" run --config "$tmp/fp8_without.json"
expect_error "train.fp8.margin" run --config "$tmp/fp8_margin.json"
expect_error "train.fp8.recipe: 'mxfp4'" run --config "$tmp/fp8_recipe.json"
expect_error "unknown config key 'train.fp8.amax_history'" run --config "$tmp/fp8_key.json"
expect_error "train: fp8 recipe delayed on the cuda backend is not supported yet" run --config "$tmp/fp8_cuda.json"
expect_error "sweep.precision: 'fp8' is not fp32, bf16 or fp16" run --config "$tmp/fp8_sweep.json"
expect_error "train.communication_data_type: 'fp16' is not \"auto\", \"fp32\" or the run's precision \"bf16\"" run --config "$tmp/comm_dtype.json"
expect_error "train.loss_scale: 'static' is not \"auto\", \"none\" or \"dynamic\"" run --config "$tmp/loss_scale.json"
expect_error "conformance.precisions: 'bf16' is listed twice" run --suites conformance --config "$tmp/precisions_twice.json"
expect_error "conformance.precisions: a non-empty list of fp32, bf16, fp16" run --suites conformance --config "$tmp/precisions_empty.json"
expect_error "sweep.layouts: 'TP2': needs 2 ranks; a sweep runs every layout on all 1" run --sweep TP2
expect_error "--sweep and --suites do not go together" run --sweep --suites train
expect_error "--sweep: an empty layout in 'DP1,,TP1'" run --sweep DP1,,TP1
# An MoE model on a non-CPU backend: said once for the whole sweep (not "no layout fits").
printf '{"backend": "cuda", "model": {"num_experts": 4, "moe_router_topk": 2}, "sweep": {"precision": "bf16"}}' >"$tmp/sweep_moe_cuda.json"
expect_error "sweep: model.num_experts = 4: MoE layers run on the CPU backend only so far, not cuda" \
  run --config "$tmp/sweep_moe_cuda.json" --sweep
expect_error "kernels.filter: empty" run --suites kernels --config "$tmp/kernels_empty.json"
expect_error "conformance.layouts: 'TP2xQP2' has an unknown dimension at 'QP2'" run --suites conformance --config "$tmp/bad_layout.json"
# dtbench claims: a missing, malformed or non-report --report, a bad catalog.
expect_error "report file not found or unreadable: $tmp/nonexistent.json" claims --report "$tmp/nonexistent.json"
expect_error "report $tmp is a directory, not a file" claims --report "$tmp"
expect_error "malformed JSON" claims --report "$tmp/malformed.json"
expect_error "report $tmp/not_object.json: the top level must be an object" claims --report "$tmp/not_object.json"
expect_error "claims --report is empty" claims --report ""
expect_error "claims --catalog is empty" claims --catalog ""
# A report read as `dtbench summary` reads it, then each field the claims read checked for its type.
python3 - "$(dirname "$0")/../results/baselines/ci-quick-np4.json" "$tmp" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
v = json.loads(json.dumps(r)); v["schema_version"] = 999
json.dump(v, open(f"{sys.argv[2]}/report_v999.json", "w"))
for b in r["benchmarks"]:
    if b.get("op") == "all_reduce" and b.get("placement") == "out_of_place":
        b["real_time"] = "x"
json.dump(r, open(f"{sys.argv[2]}/report_rt_str.json", "w"))
PY
expect_error "schema_version 999 is not 6" claims --report "$tmp/report_v999.json"
expect_error ": \"real_time\" must be a number > 0, got \"x\"" claims --report "$tmp/report_rt_str.json"
expect_error "malformed JSON in claims catalog $tmp/malformed.json" claims --catalog "$tmp/malformed.json"
printf '{"claims": [{"id": 1, "claim": "c", "figures": "f", "conditions": "k", "method": "analytic", "evaluator": "nosuch", "tolerance": 0.1}]}' >"$tmp/bad_catalog.json"
expect_error "unknown evaluator 'nosuch'" claims --catalog "$tmp/bad_catalog.json"

# dtbench plan: a hardware file missing a field, with an unknown key, a wrong type or a rate <= 0;
# a missing hardware file or name; a model that fits no layout; N not factorable into the layout.
hw="$(dirname "$0")/hardware/a100-40gb.json"
# hw_case NAME SED WANT: a100-40gb.json edited by SED into hw_NAME.json, 10b planned on it: the error WANT.
hw_case() { sed "$2" "$hw" >"$tmp/hw_$1.json"; expect_error "$3" plan --model 10b --gpus 8 --hardware "$tmp/hw_$1.json"; }
grep -v '"gb_per_s": 1244' "$hw" | sed 's/"alpha_us": 3,/"alpha_us": 3/' >"$tmp/hw_missing.json"
expect_error "hw_missing.json: missing \"memory.gb_per_s\"" plan --model 10b --gpus 8 --hardware "$tmp/hw_missing.json"
hw_case key 's/"gb_per_s": 1244/"gb_per_sec": 1244/' "missing \"memory.gb_per_s\" (found \"memory.gb_per_sec\": misspelt?)"
hw_case type 's/"ranks_per_node": 8/"ranks_per_node": "8"/' "\"ranks_per_node\" must be an integer"
hw_case zero 's/"gb_per_s": 1244/"gb_per_s": 0/' "\"memory.gb_per_s\" must be > 0, got 0"
hw_case sms 's/"sm_count": 108/"sm_count": 0/' "\"sm_count\" must be in [1, 1048576], got 0"
hw_case kernel 's/"attention_kernel": "fused"/"attention_kernel": "flash"/' "\"attention_kernel\" must be \"materialized\" or \"fused\""
expect_error "unknown attention kernel 'flash' (materialized, fused)" plan --model 10b --gpus 8 --hardware a100-40gb --attention flash
expect_error "unknown attention kernel 'flash' (materialized, fused)" memory --model 10b --attention flash
expect_error "hardware file not found or unreadable: $tmp/nonexistent.json" plan --model 10b --gpus 8 --hardware "$tmp/nonexistent.json"
expect_error "--hardware 'a100-40g': no such file and no named hardware (did you mean a100-40gb?)" plan --model 10b --gpus 8 --hardware a100-40g
expect_error "malformed JSON in hardware file $tmp/malformed.json" plan --model 10b --gpus 8 --hardware "$tmp/malformed.json"
expect_error "no layout of gpt3-175b on 8 GPUs fits 40.0 GiB: the smallest needs" plan --model gpt3-175b --gpus 8 --hardware a100-40gb
expect_error "--tp 4 does not divide --gpus 6" plan --model 10b --gpus 6 --tp 4 --hardware a100-40gb
expect_error "--gpus must be >= 1, got 0" plan --model 10b --gpus 0 --hardware a100-40gb
expect_error "--tp x --pp x --dp = 16 does not divide --gpus 8" plan --model 10b --gpus 8 --tp 2 --pp 2 --dp 4 --hardware a100-40gb
expect_error "no layout of 3b on 8 GPUs: --tp 8 does not divide the model's 20 heads" plan --model 3b --gpus 8 --tp 8 --hardware a100-40gb
# The refusal names what the fixed values leave (it said "tp must divide --gpus and the heads (96)"
# for --tp 8 on 8 GPUs with ZeRO 3, although 8 divides both: ZeRO needs dp > 1).
expect_error "--zero-stage 3 needs dp > 1 (ZeRO shards over the DP ranks): --tp 8 on --gpus 8 leaves dp 1" plan --model gpt3-175b --gpus 8 --tp 8 --zero-stage 3 --hardware a100-40gb
expect_error "--zero-stage 1 needs dp > 1 (ZeRO shards over the DP ranks): --pp 8 on --gpus 8 leaves dp 1" plan --model gpt3-175b --gpus 8 --pp 8 --zero-stage 1 --hardware a100-40gb
expect_error "--zero-stage 2 needs dp > 1 (ZeRO shards over the DP ranks): --gpus 1 leaves dp 1" plan --model 1b --gpus 1 --zero-stage 2 --hardware a100-40gb
# A pp that does not divide the layers is planned with the balancer's split; more stages than layers is not.
expect_error "no layout of custom on 8 GPUs: --pp 8 is more stages than the model's 6 layers" plan --layers 6 --hidden 64 --heads 4 --gpus 8 --pp 8 --hardware a100-40gb
expect_error "no layout of custom on 8 GPUs: --tp 2 x --dp 2 on --gpus 8 leaves pp = 2, more stages than the model's 1 layers" plan --layers 1 --hidden 64 --heads 4 --gpus 8 --tp 2 --dp 2 --hardware a100-40gb
expect_error "no layout of custom on 8 GPUs: --dp 2 on --gpus 8 leaves tp x pp = 4, and no tp dividing the model's 3 heads times a pp of at most its 3 layers makes 4" plan --layers 3 --hidden 48 --heads 3 --gpus 8 --dp 2 --hardware a100-40gb
expect_error "--schedules zb: expected all or 1f1b" plan --model 1b --gpus 8 --schedules zb --hardware a100-40gb
# A file without the shape model prices materialized attention only: a fused stack is refused on it.
/usr/bin/python3 - "$src/harness/hardware/a100-40gb.json" "$tmp/flat.json" <<'PY'
import json, sys
h = json.load(open(sys.argv[1]))
for k in ("sm_count", "gemm_tiles", "gemm_fraction", "l2_gb_per_s", "fused_attention"):
    h.pop(k, None)
    h["sources"].pop(k, None)
h["attention_kernel"] = "materialized"
json.dump(h, open(sys.argv[2], "w"))
PY
expect_error "flat.json has no shape model" plan --model 1b --gpus 8 --stack megatron-core --hardware "$tmp/flat.json"
expect_error "unknown model '10bb' (did you mean 10b?)" plan --model 10bb --gpus 8 --hardware a100-40gb
expect_error "--zero-stage must be 0-3, got 4" plan --model 10b --gpus 8 --zero-stage 4 --hardware a100-40gb
expect_error "moe-6b is an MoE model" plan --model moe-6b --gpus 8 --hardware a100-40gb
# Context parallelism: a --cp whose 2 cp does not divide the sequence, and one not dividing --gpus.
expect_error "--cp 4 needs 2 cp = 8 to divide --seq 4100 (each sequence is cut into 2 cp chunks)" plan --model llama3-8b --gpus 8 --cp 4 --seq 4100 --hardware h100-sxm
expect_error "--cp 3 does not divide --gpus 8" plan --model llama3-8b --gpus 8 --cp 3 --hardware h100-sxm
expect_error "llama3-405b's default batch of 16777216 tokens is 2097152 sequences of 8, more than a global batch may be (1048576): give --global-batch" plan --model llama3-405b --gpus 16 --seq 8 --hardware h100-sxm
expect_error "--gpus is required" plan --model 10b --hardware a100-40gb
expect_error "--hardware is required (or --calibrate FILE)" plan --model 10b --gpus 8
expect_error "give --hardware FILE or --calibrate FILE, not both" plan --calibrate "$tmp/cal.json" --hardware a100-40gb
expect_error "--model plans: give --gpus N with it" plan --calibrate "$tmp/cal.json" --model 1b --top 0
expect_error "--precision plans: give --gpus N with it" plan --calibrate "$tmp/cal.json" --precision XX
# ... a key twice, a number past double's range, an achievable rate above the peak, a figure no
# machine has; sizes past any model's (the plan's time grows with them); the scale claims' inputs.
hw_case dup 's/"ranks_per_node": 8,/"ranks_per_node": 8, "ranks_per_node": 2,/' \
  "hardware file $tmp/hw_dup.json: key 'ranks_per_node' appears twice in one object"
hw_case 1e400 's/"device_memory_gib": 40,/"device_memory_gib": 1e400,/' "hardware file $tmp/hw_1e400.json: number overflow"
hw_case over_peak 's/"tflops": 234/"tflops": 1000/' "\"gemm.bf16.tflops\" = 1000.000000 exceeds \"peak_tflops.bf16\" = 312.000000"
hw_case huge 's/"device_memory_gib": 40,/"device_memory_gib": 1e300,/' "\"device_memory_gib\" = 1e+300 is outside [1e-06, 1e+07]"
# The name printed in a plan's header is one line; a source names a key of the schema; the
# intra-node fits are there for a node of several ranks, and none is larger than a node.
hw_case name_nl 's/"name": "a100-40gb"/"name": "a100\\nx"/' "\"name\" has a control character: one line of text"
hw_case src_typo 's/"gemm.tflops":/"gemm.tflopz":/' "\"sources.gemm.tflopz\" names no field of the file"
hw_case rpn1 's/"ranks_per_node": 8/"ranks_per_node": 1/' "is an intra-node fit of group 2, larger than a node (\"ranks_per_node\" = 1)"
python3 -c 'import json, sys; h = json.load(open(sys.argv[1])); h["collectives"] = [c for c in h["collectives"] if c["link"] != "intra_node"]; json.dump(h, open(sys.argv[2], "w"))' "$hw" "$tmp/hw_no_intra.json"
expect_error "\"collectives\" has no intra_node fit" plan --model 10b --gpus 8 --hardware "$tmp/hw_no_intra.json"
expect_error "--global-batch must be in [1, 1048576], got 2147483647" plan --model 1b --gpus 8 --global-batch 2147483647 --hardware a100-40gb
expect_error "--layers must be in [1, 4096], got 100000" plan --layers 100000 --hidden 64 --heads 4 --gpus 8 --hardware a100-40gb
expect_error "--micro-batch-size must be in [1, 65536], got 1000000000" plan --model 1b --gpus 8 --micro-batch-size 1000000000 --hardware a100-40gb
# A plan past the hardware file's largest collective fit (1024 ranks inter-node) says it extrapolates;
# one within the fits does not.
"$dtbench" plan --model 1b --gpus 2048 --hardware a100-80gb --top 1 >"$tmp/plan_big.txt" 2>&1 &&
  grep -q "all-reduce fits go up to 1024 ranks: groups of up to 2048 here" "$tmp/plan_big.txt" ||
  { echo "FAIL: plan on 2048 GPUs does not say it extrapolates:"; cat "$tmp/plan_big.txt"; exit 1; }
"$dtbench" plan --model 1b --gpus 8 --hardware a100-80gb --top 1 >"$tmp/plan_small.txt" 2>&1 &&
  ! grep -q "extrapolation" "$tmp/plan_small.txt" ||
  { echo "FAIL: plan on 8 GPUs says it extrapolates (or failed):"; cat "$tmp/plan_small.txt"; exit 1; }
python3 - "$(dirname "$0")/claims/claims.json" "$tmp" <<'PY'
import json, sys
cat = json.load(open(sys.argv[1]))
for name, key, value in (("gpus0", "gpus", 0), ("speedneg", "speedup", -17), ("layout", "layout", "TP3xPP2xDP2")):
    c = json.loads(json.dumps(cat))
    for e in c["claims"]:
        if e["id"] == 22:
            e["inputs"][key] = value
    json.dump(c, open(f"{sys.argv[2]}/claims_{name}.json", "w"))
PY
expect_error "entry 22: input 'gpus' must be an integer in [1, 1048576], got 0" claims --catalog "$tmp/claims_gpus0.json"
expect_error "entry 22: input 'speedup' must be a number in (0, 1e+30], got -17" claims --catalog "$tmp/claims_speedneg.json"
expect_error "claims: entry 22 (evaluator parallelism_speedup): input 'layout' TP3xPP2xDP2 uses 12 GPUs, not the entry's gpus = 8" claims --catalog "$tmp/claims_layout.json"
# dtbench validate: bad usage before anything runs.
# An --output that cannot be written is refused before measuring (it was found after the level had
# run, its results lost): nothing on stdout.
expect_error "--output /proc/dtb/v.json: its directory is not writable: '/proc/dtb'" validate --output /proc/dtb/v.json
[ ! -s "$tmp/out" ] || { echo "FAIL: validate ran before refusing an unwritable --output:"; cat "$tmp/out"; fails=$((fails + 1)); }
expect_error "--expect: unknown key 'gpus'" validate --expect gpus=8
expect_error "--expect: cores=many is not a non-negative number" validate --expect cores=many
expect_error "--expect: nodes=0x1 is not a non-negative number" validate --expect nodes=0x1
expect_error "--expect: cores= 2 is not a non-negative number" validate --expect "cores= 2"
expect_error "--ranks-per-node: Value 0 not in range 1 to 1048576" validate --ranks-per-node 0
expect_error "--expect: nodes given twice" validate --expect nodes=1,nodes=2
expect_error "--expect: 'device' is not key=value" validate --expect device
expect_error "--duration must be a number of seconds in (0, 1e7]" validate --level burnin --duration 0
expect_error "--pairs 'x' is not one of all, adaptive" validate --level long --pairs x
expect_error "--pairs adaptive needs --level long or burnin" validate --level medium --pairs adaptive
expect_error "--check-timeout must be a number of seconds in [1, 1e6]" validate --check-timeout -1
expect_error "--check-timeout must be a number of seconds in [1, 1e6]" validate --check-timeout inf
expect_error "--inject: 'hang' takes no factor (RANK:hang)" validate --inject 0:hang:3
expect_error "--inject: 'sdc' takes no factor (RANK:sdc)" validate --sdc --inject 0:sdc:1
expect_error "--inject 0:sdc: level medium has no SDC replay to corrupt" validate --level medium --inject 0:sdc
expect_error "--expect: nodes=1.5 is not a whole number >= 1" validate --expect nodes=1.5
expect_error "--make-baseline needs --level medium or higher" validate --make-baseline "$tmp/b.json"
expect_error "--make-baseline with --inject would make the injected fault the baseline" validate --level medium --make-baseline "$tmp/b.json" --inject 0:compute:2
expect_error "--make-baseline and --output are the same file" validate --level medium --make-baseline "$tmp/same.json" --output "$tmp/same.json"
mkdir -p "$tmp/adir"
expect_error "--output $tmp/adir: exists and is not a regular file" validate --output "$tmp/adir"
expect_error "--rules $tmp/adir: is a directory, not a file" validate --rules "$tmp/adir"
printf '{"kind": "validate-rules", "rules": []}' >"$tmp/rules_empty.json"
expect_error "no rules: an empty list would judge nothing" validate --rules "$tmp/rules_empty.json"
printf '{"kind": "validate-rules", "rules": [{"name": "g", "type": 3, "metric": "compute/gemm_gflops", "fail": 1}]}' >"$tmp/rules_type.json"
expect_error "rule 'g': needs a \"type\" (a string)" validate --rules "$tmp/rules_type.json"
printf '{"kind": "validate-rules", "rules": [{"name": "g", "type": "min", "metric": "compute/gemm_gflops", "fail": 1e999}]}' >"$tmp/rules_big.json"
expect_error "malformed JSON" validate --rules "$tmp/rules_big.json"
printf '{"kind": "validate-rules", "rules": [{"name": "a", "type": "min", "metric": "compute/gemm_gflops", "fail": 1}, {"name": "k", "type": "k_of", "k": 4294967297, "of": ["a"]}]}' >"$tmp/rules_k.json"
expect_error "rule 'k': k 4294967297 is not in [1, 1]" validate --rules "$tmp/rules_k.json"
printf '{"kind": "validate-baseline", "metrics": {"compute/gemm_gflops": {"value": 0}}}' >"$tmp/base_zero.json"
expect_error "metric compute/gemm_gflops has no positive numeric \"value\"" validate --baseline "$tmp/base_zero.json"
printf '{"kind": "validate-baseline", "metrics": {"compute/gemm_gflops": {"value": 0.1, "unit": "TFLOP/s"}}}' >"$tmp/base_unit.json"
expect_error "metric compute/gemm_gflops is in \"TFLOP/s\", dtbench measures it in GFLOP/s" validate --baseline "$tmp/base_unit.json"
printf '{"kind": "validate-baseline", "metrics": {}}' >"$tmp/base_empty.json"
expect_error "no metrics: it would judge nothing" validate --baseline "$tmp/base_empty.json"
expect_error "--inject: rank 1 is not in [0, 1)" validate --level medium --inject 1:hang
expect_error "--rules $tmp/nonexistent.json: no such file" validate --rules "$tmp/nonexistent.json"
expect_error "--rules $tmp/malformed.json: malformed JSON" validate --rules "$tmp/malformed.json"
expect_error "--rules $tmp/not_object.json: not a validate rules file" validate --rules "$tmp/not_object.json"
printf '{"kind": "validate-rules", "rules": [{"name": "g", "type": "baseline_drop", "metric": "compute/gemm_gflops", "fail": 0.3}]}' >"$tmp/rules_base.json"
expect_error "rule 'g' (baseline_drop) needs --baseline" validate --rules "$tmp/rules_base.json"
printf '{"kind": "validate-rules", "rules": [{"name": "g", "type": "min", "metric": "gemm", "fail": 1}]}' >"$tmp/rules_metric.json"
expect_error "rule 'g': unknown metric 'gemm'" validate --rules "$tmp/rules_metric.json"
expect_error "--level 'fast' is not one of quick, medium, long, burnin" validate --level fast
expect_error "--ranks-per-node 3 does not divide the 1 ranks" validate --ranks-per-node 3
expect_error "--ranks-per-node 3 does not divide the 1 ranks" run --ranks-per-node 3
expect_error "--ranks-per-node must be positive, got -2" run --ranks-per-node -2
expect_error "--ranks-per-node must be positive, got 0" run --ranks-per-node 0
printf '{"train": {"dp_allreduce": "tree"}}' >"$tmp/dp_allreduce_bad.json"
printf '{"suites": ["train"], "train": {"dp_allreduce": "hierarchical"}}' >"$tmp/dp_allreduce_one_node.json"
printf '{"suites": ["conformance"], "conformance": {"layouts": ["DP4:zero2:hier2"]}}' >"$tmp/hier_zero2.json"
printf '{"suites": ["conformance"], "conformance": {"layouts": ["PP2xDP2:hier2"]}}' >"$tmp/hier_one_node_group.json"
expect_error "train.dp_allreduce: 'tree' is not \"flat\" or \"hierarchical\"" run --config "$tmp/dp_allreduce_bad.json"
expect_error "train.dp_allreduce: hierarchical DP all-reduce over nodes of 1 ranks: the layout's 1 ranks are one node" run --config "$tmp/dp_allreduce_one_node.json"
expect_error "'DP4:zero2:hier2': hierarchical DP all-reduce over nodes of 2 ranks: ZeRO stage 2 reduce-scatters" run --config "$tmp/hier_zero2.json"
expect_error "the DP group of rank 0 lies on one node" run --config "$tmp/hier_one_node_group.json"
expect_error "the sweep runs the flat DP all-reduce only" run --sweep DP1:hier1
expect_error "--backend 'gpu' is not cpu or cuda" validate --backend gpu
expect_error "--inject: rank 5 is not in [0, 1)" validate --level medium --inject 5:compute:2
expect_error "--inject: 'memory' is not a fault this build injects" validate --level medium --inject 0:memory:2
expect_error "--inject: factor '0.5' is not a number >= 1" validate --level medium --inject 0:compute:0.5
expect_error "--inject: 'x' is not RANK:compute:FACTOR" validate --level medium --inject x
expect_error "--tolerance must be in (0, 1)" validate --level medium --tolerance 1.5
expect_error "--baseline $tmp/nonexistent.json: no such file" validate --baseline "$tmp/nonexistent.json"
expect_error "malformed JSON" validate --baseline "$tmp/malformed.json"
expect_error "not a validate baseline" validate --baseline "$tmp/not_object.json"

# Stale gradients and local steps (docs/comm-efficiency.md): the recipes' refusals.
printf '{"train": {"staleness": -1}}' >"$tmp/stale_negative.json"
printf '{"train": {"staleness": 1, "local_steps": 2}}' >"$tmp/stale_local.json"
printf '{"train": {"delay_compensation": 0.1}}' >"$tmp/dc_alone.json"
printf '{"train": {"local_steps": 3, "steps": 10}}' >"$tmp/local_steps_divide.json"
printf '{"train": {"staleness": 1, "zero_stage": 1}}' >"$tmp/stale_zero1.json"
printf '{"train": {"staleness": 1, "precision": "fp16"}}' >"$tmp/stale_fp16.json"
printf '{"train": {"local_steps": 2, "checkpoint_dir": "%s/ck", "checkpoint_every": 2}}' "$tmp" >"$tmp/local_ckpt.json"
printf '{"suites": ["conformance"], "conformance": {"layouts": ["DP4:local0"]}}' >"$tmp/local0.json"
printf '{"suites": ["conformance"], "conformance": {"layouts": ["TP2xDP2:stale1"]}}' >"$tmp/stale_tp.json"
expect_error "train.staleness = -1 is out of range" run --config "$tmp/stale_negative.json"
expect_error "train.staleness = 1 with train.local_steps = 2: stale gradients and local steps do not combine" run --config "$tmp/stale_local.json"
expect_error "train.delay_compensation = 0.1 needs train.staleness >= 1" run --config "$tmp/dc_alone.json"
expect_error "train.steps = 10 is not a multiple of train.local_steps = 3" run --config "$tmp/local_steps_divide.json"
expect_error "train.staleness = 1 with zero_stage = 1" run --config "$tmp/stale_zero1.json"
expect_error "train.staleness = 1 with precision fp16: not supported" run --config "$tmp/stale_fp16.json"
expect_error "train.local_steps = 2 with train.checkpoint_every = 2: not supported" run --config "$tmp/local_ckpt.json"
expect_error "'DP4:local0' has local_steps 0 (localH needs H >= 1)" run --config "$tmp/local0.json"
expect_error "'TP2xDP2:stale1': conformance.staleness = 1 with tensor_parallel = 2" run --config "$tmp/stale_tp.json"

# --force: the memory refusal becomes one warning line and the run goes on (here only as
# far as printing the config, so nothing is allocated).
n=$((n + 1))
"$dtbench" run --config "$tmp/huge_model.json" --force --print-config >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ] || ! grep -q "dtbench: warning: .*more than this machine's memory allows.*running anyway (--force)" "$tmp/err" ||
   ! grep -q '"L": 1000' "$tmp/out"; then
  echo "FAIL: --force did not turn the memory refusal into a warning (exit $rc):"; cat "$tmp/err"
  fails=$((fails + 1))
else
  echo "ok: dtbench run --force -> exit 0, $(cat "$tmp/err")"
fi

# bf16 / fp16 validate on cuda (its Backend::bf16_ops / fp16_ops): the precision suite's
# config on the cuda backend is printed, exit 0 (--print-config: nothing runs).
n=$((n + 1))
if "$dtbench" run --config "$tmp/precision_cuda.json" --print-config >"$tmp/out" 2>"$tmp/err" &&
   grep -q '"backend": "cuda"' "$tmp/out"; then
  echo "ok: dtbench run --config precision_cuda.json --print-config -> exit 0"
else
  echo "FAIL: the precision suite on cuda did not validate:"; cat "$tmp/err"
  fails=$((fails + 1))
fi

echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
