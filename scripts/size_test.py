#!/usr/bin/env python3
"""ctest size: no source file over 600 lines and no function over 150.

A file that grows past the limits is split along its seams before it lands; this test keeps
the limits from drifting. Counted: every tracked C++/CUDA/Python source and the Python and
shell scripts without an extension under scripts/. Not counted: data (JSON, .bin, corpora)
and the schema fragments, which are generated-like tables. Function lengths: Python from the
ast (first line of the def to its last line); C++ by a brace scan that ignores comments and
strings and takes a body to be a '{' at file or class scope whose preceding code ends with
')' or a trailing qualifier (const, override, noexcept, final, mutable, a trailing return
type) — the lines from the signature's ')' to the closing '}', lambdas inside included.
"""
import ast
import re
import subprocess
import sys
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 150
CXX = (".cc", ".h", ".cu", ".cuh")


def tracked_sources():
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, text=True, check=True).stdout.split()
    for name in sorted(set(out)):
        p = ROOT / name
        if not p.is_file():
            continue
        if p.suffix in CXX or p.suffix == ".py":
            yield p
        elif name.startswith("scripts/") and p.suffix == "" and p.read_bytes()[:2] == b"#!":
            yield p


def strip_cxx(text):
    """The text with comments, string and character literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + (m.group(1) if m else "") + '"', i)
            j = n if end < 0 else end + len(m.group(1) if m else "") + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i)); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


QUALIFIER = re.compile(r"\)\s*(const|override|noexcept|final|mutable|volatile|&|&&|\s|->\s*[\w:<>,\s*&]+)*$")


def cxx_functions(text):
    """(name, first line, last line) of each function body at file, namespace or class scope."""
    code = strip_cxx(text)
    stack = []  # per open brace: is it a function body, its start line, its name
    found = []
    last_stop = 0  # index after the last ';', '{' or '}' at a non-function scope
    line = 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == "{":
            in_function = any(f for f, _, _ in stack)
            head = code[last_stop:i]
            is_body = False
            if not in_function and QUALIFIER.search(head.rstrip()) and not re.search(
                    r"\b(namespace|class|struct|enum|union)\b[^()]*$", head):
                is_body = True
            if is_body:
                paren = head.rfind(")")
                start = line - head[paren:].count("\n")
                m = re.search(r"([~\w:]+)\s*\(", head)
                name = m.group(1) if m else "?"
                stack.append((True, start, name))
            else:
                stack.append((False, line, ""))
            if not in_function:
                last_stop = i + 1
        elif c == "}":
            if stack:
                f, start, name = stack.pop()
                if f:
                    found.append((name, start, line))
            if not any(f for f, _, _ in stack):
                last_stop = i + 1
        elif c == ";" and not any(f for f, _, _ in stack):
            last_stop = i + 1
    return found


def py_functions(text, path):
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError:
        return []
    return [(n.name, n.lineno, n.end_lineno) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def is_python(path):
    return path.suffix == ".py" or path.read_bytes()[:64].startswith(b"#!/usr/bin/env python")


class SizeTest(unittest.TestCase):
    def test_files(self):
        long = []
        for p in tracked_sources():
            n = p.read_text(errors="replace").count("\n")
            if n > MAX_FILE_LINES:
                long.append(f"{p.relative_to(ROOT)}: {n} lines")
        self.assertEqual(long, [], f"files over {MAX_FILE_LINES} lines (split them along their seams)")

    def test_functions(self):
        long = []
        for p in tracked_sources():
            text = p.read_text(errors="replace")
            if p.suffix in CXX:
                funcs = cxx_functions(text)
            elif is_python(p):
                funcs = py_functions(text, p)
            else:
                continue
            for name, a, b in funcs:
                if b - a + 1 > MAX_FUNCTION_LINES:
                    long.append(f"{p.relative_to(ROOT)}:{a} {name}: {b - a + 1} lines")
        self.assertEqual(long, [], f"functions over {MAX_FUNCTION_LINES} lines")

    def test_scanner_finds_a_long_function(self):
        """The C++ scan counts what it should: a long body, not a namespace or a class."""
        body = "\n".join(["  x += 1;"] * 200)
        text = ("namespace a {\nstruct S {\n  int f() const {\n" + body + "\n  }\n};\n"
                "int g(int x) {\n  if (x) { return 1; }\n  auto l = [](int y) { return y; };\n  return l(x);\n}\n}\n")
        funcs = {name: b - a + 1 for name, a, b in cxx_functions(text)}
        self.assertEqual(funcs.get("f"), 202)
        self.assertEqual(funcs.get("g"), 5)
        self.assertNotIn("S", funcs)
        self.assertNotIn("a", funcs)


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False).result.wasSuccessful() else 1)
