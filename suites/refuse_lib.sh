# Sourced by the suites' shell tests (precision_fp8_test.sh, conformance_fp8_test.sh): `refuse WANT
# CONFIG` runs "$dtbench" run on one rank with the JSON CONFIG and expects what the harness promises
# for refused input: exit 2 and one line on stderr that contains WANT. Prints "ok: <the line>", or
# "FAIL: ..." with stderr and counts it in $fails (the caller exits with it). Needs $dtbench and $tmp.
fails=0
refuse() {
  local want="$1" cfg="$2" rc=0
  printf '%s' "$cfg" >"$tmp/bad.json"
  "$dtbench" run --config "$tmp/bad.json" --output-dir "$tmp" >"$tmp/out" 2>"$tmp/err" || rc=$?
  if [ "$rc" -ne 2 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL: $cfg -> exit $rc, wanted '$want':"; cat "$tmp/err"; fails=$((fails + 1))
  else
    echo "ok: $(cat "$tmp/err")"
  fi
}
