"""The document of a report page: blocks (headings, paragraphs, tables, images, alerts) rendered both as
Markdown (plots linked as PNG files) and as one self-contained HTML page (plots inlined, inline CSS, no script).

Knows nothing of dtbench's reports: the page builders (page.py, validate.py, the suite modules) fill a Doc.
"""
import base64
import html
import re
from pathlib import Path


class Doc:
    def __init__(self):
        self.blocks = []

    def h(self, level, text, anchor=None):
        self.blocks.append(("h", level, text, anchor))

    def p(self, text, cls=None):
        self.blocks.append(("p", text, cls))

    def bullets(self, items):
        self.blocks.append(("ul", list(items)))

    def table(self, headers, rows, align=None, row_cls=None, cls=None):
        """rows: lists of cell strings (already formatted; `code` and **bold** allowed). cls: the HTML table's
        class (`wrap`: cells wrap, for columns of sentences)."""
        align = align or ["l"] + [column_align([r[i] for r in rows if i < len(r)]) for i in range(1, len(headers))]
        self.blocks.append(("table", headers, rows, align, row_cls or [None] * len(rows), cls))

    def img(self, path, alt, caption):
        self.blocks.append(("img", path, alt, caption))

    def alert(self, text, kind="fail"):
        self.blocks.append(("alert", text, kind))


_NUMERIC = re.compile(r"^[-+]?(\d|\.\d)")


def column_align(cells):
    """'r' for a column of numbers (placeholders such as – allowed), 'l' otherwise."""
    vals = [str(c).strip("*` ") for c in cells]
    vals = [v for v in vals if v not in ("", "–", "N/A", "inf", "NaN")]
    return "r" if vals and all(_NUMERIC.match(v) for v in vals) else "l"


def md_cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_md(doc):
    out = []
    for b in doc.blocks:
        kind = b[0]
        if kind == "h":
            out.append("#" * b[1] + " " + b[2])
        elif kind == "p":
            out.append(b[1])
        elif kind == "ul":
            out.append("\n".join("- " + i for i in b[1]))
        elif kind == "alert":
            out.append("> " + b[1].replace("\n", "\n> "))
        elif kind == "table":
            _, headers, rows, align, _, _ = b
            lines = ["| " + " | ".join(md_cell(h) for h in headers) + " |",
                     "|" + "|".join("---:" if a == "r" else ":---:" if a == "c" else "---" for a in align) + "|"]
            for r in rows:
                lines.append("| " + " | ".join(md_cell(c) for c in r) + " |")
            out.append("\n".join(lines))
        elif kind == "img":
            _, path, alt, caption = b
            out.append(f"![{alt}]({Path(path).name})\n\n*{caption}*")
    return "\n\n".join(out) + "\n"


_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_LINK = re.compile(r"\[([^\]]+)\]\(#([A-Za-z0-9_-]+)\)")


def html_inline(text):
    s = html.escape(str(text), quote=False)
    s = _CODE.sub(r"<code>\1</code>", s)
    s = _BOLD.sub(r"<strong>\1</strong>", s)
    s = _LINK.sub(r'<a href="#\2">\1</a>', s)
    return s


CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;
 padding:0 1.5em;color:#1f2328;line-height:1.45}
h1{border-bottom:2px solid #d0d7de;padding-bottom:.3em}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;
 margin-top:2em}
table{border-collapse:collapse;margin:.8em 0;font-size:.88em;display:block;overflow-x:auto}
th,td{border:1px solid #d0d7de;padding:.25em .6em;white-space:nowrap}th{background:#f6f8fa}
td.r{text-align:right;font-variant-numeric:tabular-nums}td.c{text-align:center}
tr.fail td{background:#ffebe9}tr.skip td{color:#6e7781}tr.error td{background:#fff8c5}
tr.pass td{background:#dafbe1}tr.warn td{background:#fff8c5}
table.wrap td{white-space:normal;vertical-align:top;min-width:9em}table.wrap td:first-child{min-width:16em}
table.wrap td.c{white-space:nowrap}
code{background:#f6f8fa;padding:.1em .3em;border-radius:3px;font-size:.92em}
figure{margin:1.2em 0}figure img{max-width:100%;border:1px solid #d0d7de}
figcaption{font-size:.9em;color:#57606a;margin-top:.3em}
.alert{border-left:6px solid #cf222e;background:#ffebe9;padding:.6em 1em;margin:1em 0;font-weight:600}
.alert.ok{border-color:#1a7f37;background:#dafbe1}.note{color:#57606a;font-size:.92em}
"""


def render_html(doc, title):
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(title)}</title>", f"<style>{CSS}</style></head><body>"]
    for b in doc.blocks:
        kind = b[0]
        if kind == "h":
            _, level, text, anchor = b
            a = f' id="{html.escape(anchor)}"' if anchor else ""
            out.append(f"<h{level}{a}>{html_inline(text)}</h{level}>")
        elif kind == "p":
            cls = f' class="{b[2]}"' if b[2] else ""
            out.append(f"<p{cls}>{html_inline(b[1])}</p>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{html_inline(i)}</li>" for i in b[1]) + "</ul>")
        elif kind == "alert":
            cls = "alert ok" if b[2] == "ok" else "alert"
            out.append(f'<div class="{cls}">{html_inline(b[1])}</div>')
        elif kind == "table":
            _, headers, rows, align, row_cls, tcls = b
            tc = f' class="{tcls}"' if tcls else ""
            t = [f"<table{tc}><thead><tr>" + "".join(f"<th>{html_inline(h)}</th>" for h in headers) + "</tr></thead><tbody>"]
            for r, cls in zip(rows, row_cls):
                c = f' class="{cls}"' if cls else ""
                t.append(f"<tr{c}>" + "".join(
                    f'<td class="{a}">{html_inline(v)}</td>' if a in ("r", "c") else f"<td>{html_inline(v)}</td>"
                    for v, a in zip(r, align)) + "</tr>")
            t.append("</tbody></table>")
            out.append("".join(t))
        elif kind == "img":
            _, path, alt, caption = b
            data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
            out.append(f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'
                       f"<figcaption>{html_inline(caption)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
