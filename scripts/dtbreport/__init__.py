"""dtbench's report tools as a package: loading and formatting, the page (Markdown and HTML), plots, the
validate and claims pages, the comparison of two reports, the schema assembler, and one module per suite
(dtbreport/suites/), found through registry.py. The command-line tools are scripts/report.py,
scripts/compare.py and scripts/validate_report.py.
"""
