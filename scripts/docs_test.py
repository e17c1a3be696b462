#!/usr/bin/python3
"""ctest docs: README.md stays a front door and every documentation link resolves.

Usage: docs_test.py [unittest options]   (standard library only)

Checks that:
- README.md's first code block holds the two commands (`scripts/run`, `scripts/test`) and comes
  before any section (a `##` heading);
- README.md is at most MAX_README_LINES lines;
- every file in docs/ is linked from README.md;
- every relative link in README.md, docs/*.md, results/README.md and results/logs/*.md names a
  file that exists, and a `#fragment` names a heading of the page it points into (headings
  made into anchors as GitHub makes them; headings inside code blocks do not count).
Not checked: links to other sites (http, https, mailto).
"""
import re
import sys
import unittest
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 200

# [text](target) or [text](target "title"); images too. Inline code is removed first.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text):
    """The lines of a Markdown text outside fenced code blocks, as (line number, line)."""
    inside = False
    for n, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield n, line


def links(path):
    """Every link target in `path`'s prose, as (line number, target)."""
    out = []
    for n, line in prose_lines(path.read_text(encoding="utf-8")):
        line = re.sub(r"`[^`]*`", "", line)
        out.extend((n, m.group(1)) for m in LINK.finditer(line))
    return out


def anchors(path):
    """The anchors GitHub gives the headings of `path`: lower case, punctuation dropped,
    spaces to hyphens, a repeated anchor suffixed -1, -2, ..."""
    seen = {}
    out = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        k = seen.get(slug, 0)
        seen[slug] = k + 1
        out.add(slug if k == 0 else f"{slug}-{k}")
    return out


def pages():
    """The Markdown pages whose links are checked."""
    found = [README] + sorted(DOCS.glob("*.md"))
    found += sorted((ROOT / "results").glob("README.md")) + sorted((ROOT / "results" / "logs").glob("*.md"))
    return found


class FrontDoor(unittest.TestCase):
    def test_two_commands_first(self):
        text = README.read_text(encoding="utf-8").split("\n")
        first_fence = next((i for i, l in enumerate(text) if FENCE.match(l)), None)
        self.assertIsNotNone(first_fence, "README.md has no code block")
        first_section = next((i for i, l in enumerate(text) if l.startswith("## ")), len(text))
        self.assertLess(first_fence, first_section,
                        f"README.md: the first code block (line {first_fence + 1}) comes after the first "
                        f"section (line {first_section + 1})")
        end = next(i for i in range(first_fence + 1, len(text)) if FENCE.match(text[i]))
        block = "\n".join(text[first_fence + 1:end])
        for command in ("scripts/run", "scripts/test"):
            self.assertIn(command, block, f"README.md's first code block lacks {command}")

    def test_short(self):
        n = len(README.read_text(encoding="utf-8").rstrip("\n").split("\n"))
        self.assertLessEqual(n, MAX_README_LINES,
                             f"README.md has {n} lines, more than {MAX_README_LINES}: move the detail to docs/")

    def test_every_docs_page_linked(self):
        linked = set()
        for _, target in links(README):
            if not re.match(r"^[a-z]+:", target):
                linked.add((README.parent / unquote(target.split("#")[0])).resolve())
        missing = [p.relative_to(ROOT).as_posix() for p in sorted(DOCS.iterdir())
                   if p.is_file() and p.resolve() not in linked]
        self.assertEqual(missing, [], f"docs pages not linked from README.md: {missing}")


class Links(unittest.TestCase):
    def test_relative_links_resolve(self):
        broken = []
        for page in pages():
            for n, target in links(page):
                if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                    continue
                file_part, _, fragment = target.partition("#")
                dest = (page.parent / unquote(file_part)).resolve() if file_part else page
                where = f"{page.relative_to(ROOT).as_posix()}:{n}: {target}"
                if not dest.exists():
                    broken.append(f"{where} (no such file)")
                elif fragment and dest.suffix == ".md" and unquote(fragment) not in anchors(dest):
                    broken.append(f"{where} (no heading with that anchor)")
        self.assertEqual(broken, [], "broken links:\n" + "\n".join(broken))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
