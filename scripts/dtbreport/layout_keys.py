"""The parallel layout's keys as dtbench spells them (reference/layout/layout_spec.h, the one table):
layout_keys.json beside this file is `dtbench list --layout-keys --json`, written by
`scripts/layout_keys_test.py json BUILD/dtbench --write` and checked equal to the binary's output by the
ctest layout_keys_json. Scripts read a key's spelling here instead of writing it again (the ctest
layout_key_literals fails on a key written as a string literal).
"""

import json
from pathlib import Path
from types import SimpleNamespace

ROWS = json.loads((Path(__file__).resolve().parent / "layout_keys.json").read_text())
"""One dict per key, in the table's order: key, config_key, spec_token, name_key, field_key, memory_flag
("" where the form has none)."""

FIELD = SimpleNamespace(**{r["key"]: r["field_key"] for r in ROWS})
"""A record's JSON field of each key, by the key's name: FIELD.tp, FIELD.zero_stage, FIELD.offload."""
