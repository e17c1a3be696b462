#!/usr/bin/env python3
"""The layout keys' spellings live in one table (reference/layout/layout_spec.cc, layout_spellings();
`dtbench list --layout-keys --json` prints it). Two checks, each a ctest:

  json DTBENCH      scripts/dtbreport/layout_keys.json (what the Python scripts read) equals the binary's
                    table (ctest layout_keys_json); `json DTBENCH --write` rewrites the file from it.
  literals DTBENCH  no source outside the table spells a layout key as a whole string literal (ctest
                    layout_key_literals); every one found is printed as FILE:LINE.

The literal rule, exact: a string literal (C++: "..." with comments removed; Python: every str constant
of the parsed module, f-string parts and their expressions included, docstrings excluded) whose whole
text is one of these spellings of the table: each config_key, field_key and memory_flag, and in C++
the dimensions' spec tokens (TP, PP, DP, EP, CP). Left out, each for a stated reason:
  - the spellings that also name something else, so a literal of them mostly means that: "precision"
    and "recompute" (suites of those names, and their own records' fields), "schedule" (the pipeline
    suite's own records' field), "micro_batches" (every suite section's training key, TrainConfig's),
    and the options' spec tokens and record-name keys ("v", "m", "zero", "offload", "local", ...), which
    are pieces of a name, not whole literals;
  - the dimensions' spec tokens in Python, where "TP" and "EP" are column headings (no script builds
    a layout spec);
  - a literal on a line that says why it is not the key, in a comment "layout-key-literal: <reason>"
    on that line or the line above (the ZeRO paper's column "DP", a peer record's scaling kind, train's
    loss curve of its plain data-parallel run);
  - the table itself (reference/layout/layout_spec*.cc), tests (*_test.cc, *_test.py, *_test.sh,
    *_test_util.h: a test states the spelling it expects), docs (*.md; not scanned).
Scanned: reference/, suites/, harness/, kernels/ (*.cc, *.h, *.cu, *.cuh) and scripts/ (*.py and the
Python scripts without a suffix).
"""

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JSON_FILE = ROOT / "scripts" / "dtbreport" / "layout_keys.json"
NOT_CHECKED = {"precision", "recompute", "schedule", "micro_batches"}
DIMENSIONS = {"tp", "pp", "dp", "ep", "cp"}
MARK = "layout-key-literal:"


def table(dtbench):
    """The binary's table (a list of dicts)."""
    out = subprocess.run([dtbench, "list", "--layout-keys", "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def spellings(rows, cpp=True):
    """{spelling: "key.form"} of the spellings the rule checks (in C++ or in Python)."""
    out = {}
    for r in rows:
        forms = [("config_key", r["config_key"]), ("field_key", r["field_key"]), ("memory_flag", r["memory_flag"])]
        if cpp and r["key"] in DIMENSIONS:
            forms.append(("spec_token", r["spec_token"]))
        for form, s in forms:
            if s and s.strip("-").replace("-", "_") not in NOT_CHECKED:
                out.setdefault(s, f"{r['key']}.{form}")
    return out


def cpp_literals(text):
    """(line, text) of each "..." literal of C++ source `text`, comments and char literals skipped."""
    out, i, line, n = [], 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
            continue
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            line += text.count("\n", i, j)
            i = j
            continue
        elif c == "'" and not (i > 0 and (text[i - 1].isalnum())):  # a char literal, not a digit separator
            j = i + 1
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        elif c == '"':
            j, buf = i + 1, []
            while j < n and text[j] != '"':
                if text[j] == "\\":
                    buf.append(text[j:j + 2])
                    j += 2
                else:
                    buf.append(text[j])
                    j += 1
            out.append((line, "".join(buf)))
            i = j + 1
            continue
        i += 1
    return out


def python_literals(text):
    """(line, text) of each str constant of Python source `text` but docstrings."""
    tree = ast.parse(text)
    docs = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for stmt in body:  # a bare string statement: a docstring or one that documents what follows
                if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                    docs.add(id(stmt.value))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs]


def exempt(rel):
    return (re.fullmatch(r"reference/layout/layout_spec[a-z_]*\.cc", rel) is not None
            or re.search(r"_test\.(cc|py|sh)$|_test_util\.h$", rel) is not None)


def sources():
    """(path relative to the root, 'cpp' or 'py') of every scanned file, sorted."""
    out = []
    for d in ("reference", "suites", "harness", "kernels"):
        out += [(p, "cpp") for p in (ROOT / d).rglob("*") if p.suffix in (".cc", ".h", ".cu", ".cuh")]
    for p in (ROOT / "scripts").rglob("*"):
        if not p.is_file():
            continue
        if p.suffix == ".py":
            out.append((p, "py"))
        elif p.suffix == "" and p.read_bytes()[:64].startswith(b"#!") and b"python" in p.read_bytes()[:64]:
            out.append((p, "py"))
    return sorted((str(p.relative_to(ROOT)), kind) for p, kind in out if not exempt(str(p.relative_to(ROOT))))


def find_literals(rows):
    """['FILE:LINE: "spelling" (key.form)'] of every literal the rule finds."""
    spelled = {"cpp": spellings(rows, True), "py": spellings(rows, False)}
    found = []
    for rel, kind in sources():
        text = (ROOT / rel).read_text(errors="replace")
        lines = text.split("\n")
        said = {i + 1 for i, l in enumerate(lines) if MARK in l} | {i + 2 for i, l in enumerate(lines) if MARK in l}
        for line, s in (cpp_literals(text) if kind == "cpp" else python_literals(text)):
            if s in spelled[kind] and line not in said:
                found.append(f'{rel}:{line}: "{s}" ({spelled[kind][s]}: read it from the table)')
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("check", choices=("json", "literals"))
    ap.add_argument("dtbench")
    ap.add_argument("--write", action="store_true", help="json: rewrite scripts/dtbreport/layout_keys.json")
    a = ap.parse_args()
    rows = table(a.dtbench)
    if a.check == "json":
        if a.write:
            JSON_FILE.write_text(json.dumps(rows, indent=1) + "\n")
        have = json.loads(JSON_FILE.read_text())
        if have != rows:
            print(f"FAIL: {JSON_FILE.relative_to(ROOT)} is not `dtbench list --layout-keys --json`; rewrite it with "
                  f"scripts/layout_keys_test.py json BUILD/dtbench --write")
            return 1
        print(f"ok: {JSON_FILE.relative_to(ROOT)} is the binary's table ({len(rows)} keys)")
        return 0
    found = find_literals(rows)
    for f in found:
        print(f)
    if found:
        print(f"FAIL: {len(found)} layout key spelling(s) outside the table (reference/layout/layout_spec.cc)")
        return 1
    print(f"ok: no layout key spelled outside the table ({len(spellings(rows))} spellings, {len(sources())} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
