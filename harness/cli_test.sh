#!/usr/bin/env bash
# Bad input on the command line or in a config ends with exactly one line on stderr,
# naming the problem, and exit status 2 — before anything is measured.
# Usage: cli_test.sh PATH/TO/dtbench
set -u
dtbench="$1"
tmp=$(mktemp -d)
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

expect_error "unknown suite 'nosuch'" run --suites nosuch
expect_error "did you mean 'train'" run --suites trian
expect_error "--bogus" run --bogus
expect_error "dtbench: error:" nosuchcommand
expect_error "dtbench: error:" ""
expect_error "unknown config key 'trian' (did you mean 'train'?)" run --config "$tmp/unknown_key.json"
expect_error "unknown config key 'train.stpes' (did you mean 'steps'?)" run --config "$tmp/unknown_nested.json"
expect_error "malformed JSON" run --config "$tmp/malformed.json"
expect_error "config file not found" run --config "$tmp/missing.json"
expect_error "unknown config 'nosuchconfig'" run --config nosuchconfig
expect_error "'train.steps' must be an integer" run --config "$tmp/wrong_type.json"
expect_error "'train.steps' must be an integer" run --config "$tmp/float_for_int.json"
expect_error "train.steps must be positive" run --config "$tmp/zero_steps.json"
expect_error "not divisible by data_parallel" run --config "$tmp/no_divide.json"
expect_error "not divisible by NH" run --config "$tmp/heads.json"
expect_error "train.seq_len = 65" run --config "$tmp/seq_len.json"
expect_error "alltoall_nosuch" run --config "$tmp/bad_op.json"
expect_error "no suites selected" run --config "$tmp/no_suites.json"
expect_error "must be an object" run --config "$tmp/not_object.json"
expect_error "is a directory" run --config "$tmp"
expect_error "data file not found" run --data "$tmp/missing.txt"
expect_error "bytes; at least" run --data "$tmp/tiny.txt"
expect_error "bytes; at least" run --data "$tmp/empty.txt"
expect_error "output directory is not writable" run --output-dir /proc/dtbench-nope

echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
