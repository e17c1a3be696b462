"""The regression gate's A/B mode (scripts/compare.py ab, docs/ci.md): build a baseline revision beside the
candidate, run both side by side and decide on paired statistics (paired.py over runner.py's interleaved runs)
and on instruction counts (count.py); build.py makes the builds, stats.py holds the tests, cli.py the command.
"""


class GateError(Exception):
    """The runs cannot be compared (exit 2): an unknown ref, a baseline that does not build or refuses the
    config, incompatible reports, a missing tool. One line."""
