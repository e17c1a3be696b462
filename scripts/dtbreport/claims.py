"""The rules-of-thumb section of a report page (`report.py --claims FILE`): one row per claim of
`dtbench claims --output FILE` with its verdict. Not the evaluation of the claims (harness/claims/claims.cc).
"""
from collections import defaultdict

from .fmt import plural

# Verdicts of `dtbench claims` and their row styles: holds green, differs as a failed check,
# holds only if yellow, cannot measure here grey as a skipped suite.
VERDICT_CLS = {"holds": "pass", "differs": "fail", "holds only if": "warn", "cannot measure here": "skip"}


def claims_section(r):
    d, c = r.doc, r.claims
    d.h(2, "Rules of thumb (dtbench claims)", "claims")
    rows = c["claims"]
    if not rows:
        d.p("The claims file holds no claims.", "note")
        return
    tally = defaultdict(int)
    for e in rows:
        tally[e["verdict"]] += 1
    order = [v for v in VERDICT_CLS if v in tally] + sorted(v for v in tally if v not in VERDICT_CLS)
    src = f" from `{c['catalog']}`" if c.get("catalog") else ""
    d.p(f"`dtbench claims` checked {plural(len(rows), 'rule')} of thumb{src}: "
        + ", ".join(f"{tally[v]} {v}" for v in order) + ". *Computed here*: dtbench's analytic memory model and "
        "pipeline formulas under the claim's conditions (where the claim is silent, the conditions say what "
        "dtbench assumed). " + (f"*Measured here*: from the suites of `{c['report']}`; " if c.get("report") else
                                "*Measured here*: no report was given (`dtbench claims --report FILE`); ")
        + "a claim that needs hardware this machine lacks is evaluated analytically and marked *cannot measure "
        "here*.")
    d.table(["claim", "conditions", "claimed", "computed here", "measured here", "verdict", "why"],
            [[f"**{e['id']}.** {e['claim']}", e["conditions"], e["predicted"], e["computed"], e["measured"],
              e["verdict"], e["why"]] for e in rows],
            align=["l", "l", "l", "l", "l", "c", "l"], row_cls=[VERDICT_CLS.get(e["verdict"]) for e in rows],
            cls="wrap")
