#!/usr/bin/python3
"""Validates dtbench reports against the report schema, assembled from its shell (harness/report.schema.json)
and each suite's fragment (suites/<suite>.schema.json, and those in $DTB_SUITE_PATH: scripts/dtbreport/schema.py).

Usage: scripts/validate_report.py [--schema SCHEMA.json] REPORT.json...
       scripts/validate_report.py [--schema SCHEMA.json] --print-schema

Prints one line per error, `REPORT: /json/pointer (record or check name): message`, and one
line `REPORT: valid` per valid report. Exit status: 0 when every report is valid, 1 when any
is invalid, 2 when a report or the schema cannot be read or parsed (one line saying why).
--schema FILE: a whole schema instead of the assembled one; --print-schema prints the schema and exits.
Needs python3-jsonschema (4.x, Draft 2020-12): run it with /usr/bin/python3.
"""
import argparse
import json
import sys
from pathlib import Path

import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dtbreport import schema as assembler  # noqa: E402
from dtbreport.load import StrictJSONError, parse_strict  # noqa: E402

MAX_MESSAGE = 240  # characters of one error message (jsonschema quotes whole values)


class InputError(Exception):
    """A file that cannot be read or is not JSON."""


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return parse_strict(f.read())
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text: {e.reason} at byte {e.start}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except StrictJSONError as e:
        raise InputError(f"{path}: not JSON: {e}") from None


def load_schema(schema_path=None):
    """The schema at schema_path, or (None) the assembled one. Errors: InputError."""
    if schema_path is not None:
        return load_json(schema_path)
    try:
        return assembler.assemble()
    except assembler.SchemaError as e:
        raise InputError(str(e)) from None


def load_validator(schema_path=None):
    """The Draft 2020-12 validator of the schema at schema_path, or (None) of the assembled schema.
    Errors: InputError."""
    schema = load_schema(schema_path)
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        where = schema_path or "the assembled report schema"
        raise InputError(f"{where}: not a valid JSON Schema: {e.message}") from None
    return jsonschema.Draft202012Validator(schema)


def schema_version(validator, where="the schema"):
    """The report schema_version the schema describes (properties.schema_version.const). Errors: InputError."""
    try:
        return validator.schema["properties"]["schema_version"]["const"]
    except (KeyError, TypeError):
        raise InputError(f"{where}: not a dtbench report schema (no properties.schema_version.const)") from None


def pointer(path):
    """A JSON pointer for a jsonschema error path ('' is the whole report)."""
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)


def describe(report, path):
    """The name of the record, check or suite the path is inside, if any ('' otherwise)."""
    path = list(path)
    if len(path) >= 2 and path[0] in ("benchmarks", "checks", "suites") and isinstance(path[1], int):
        try:
            name = report[path[0]][path[1]].get("name")
        except (IndexError, KeyError, TypeError, AttributeError):
            return ""
        if isinstance(name, str):
            return f" ({name})"
    return ""


def errors(validator, report):
    """Every schema error of `report` as (pointer, message) lines, sorted by location."""
    found = {}
    for e in validator.iter_errors(report):
        msg = " ".join(e.message.split())
        if len(msg) > MAX_MESSAGE:
            msg = msg[:MAX_MESSAGE] + "..."
        key = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in e.absolute_path)  # /2 before /10
        found[(key, msg)] = (pointer(e.absolute_path) + describe(report, e.absolute_path), msg)
    return [found[k] for k in sorted(found)]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schema", help="a whole schema (default: the shell harness/report.schema.json with "
                        "every suite's fragment)")
    parser.add_argument("--print-schema", action="store_true", help="print the schema as JSON and exit")
    parser.add_argument("reports", nargs="*", metavar="REPORT.json")
    args = parser.parse_args(argv)
    if not args.reports and not args.print_schema:
        parser.error("the following arguments are required: REPORT.json")
    try:
        validator = load_validator(args.schema)
    except InputError as e:
        print(f"validate_report: {e}", file=sys.stderr)
        return 2
    if args.print_schema:
        print(json.dumps(validator.schema, indent=2, ensure_ascii=False))
        return 0
    try:
        version = schema_version(validator, args.schema or "the assembled report schema")
    except InputError as e:
        print(f"validate_report: {e}", file=sys.stderr)
        return 2
    invalid = unreadable = False
    for path in args.reports:
        try:
            report = load_json(path)
        except InputError as e:
            print(f"validate_report: {e}", file=sys.stderr)
            unreadable = True
            continue
        found = errors(validator, report)
        if isinstance(report, dict) and "schema_version" in report and report["schema_version"] != version:
            found.insert(0, ("/schema_version", f"the report is schema version {report['schema_version']!r}, "
                                                f"this schema describes version {version}"))
        for where, msg in found:
            print(f"{path}: {where}: {msg}")
        if found:
            invalid = True
        else:
            print(f"{path}: valid (schema version {version})")
    return 2 if unreadable else 1 if invalid else 0


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends quietly
    sys.exit(main(sys.argv[1:]))
