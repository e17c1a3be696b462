"""A suite's record fields are declared once, in its schema fragment (suites/<suite>.schema.json): each
property of a record definition (record_<suite>, record_<suite>_*) says its JSON type and range, its
description, and whether it is a metric or a parameter:

    "busbw_GBps": {"description": "...", "x-metric": {"direction": "higher", "unit": "GB/s",
                                                       "source": "time_us"}, "type": "number"}
    "M": {"x-parameter": true, "type": "integer", "minimum": 1}

x-metric: direction "lower" or "higher" is better (compare.py gates on it), "info" is reported when it
changes and never gates; unit is what the number counts; source (optional) the timing field of the same
record whose samples give a derived scalar its p-value (metrics.py says more). x-parameter: the field
identifies a record (compare.py notes a change, never compares it). JSON Schema ignores these keywords,
so the strict schema that validates the C++ writer's records and the metadata that report.py and
compare.py read are the same text. A record's own fields are declared: not those inside an `if`
(conditions), nor a nested object's.
"""
from . import metrics as common

METRIC_KEY, PARAMETER_KEY = "x-metric", "x-parameter"
_METRIC_KEYS = {"direction", "unit", "source"}


class FieldError(Exception):
    """A declaration that breaks the contract above (one line naming the fragment and the field)."""


def record_properties(node):
    """Every `properties` object that describes the record's own fields: node's, and those of its
    allOf/anyOf/oneOf entries, then/else and dependentSchemas (not an `if`, not a nested object's)."""
    if not isinstance(node, dict):
        return
    if isinstance(node.get("properties"), dict):
        yield node["properties"]
    for k in ("allOf", "anyOf", "oneOf"):
        for v in node.get(k, []) if isinstance(node.get(k), list) else []:
            yield from record_properties(v)
    for k in ("then", "else"):
        yield from record_properties(node.get(k))
    if isinstance(node.get("dependentSchemas"), dict):
        for v in node["dependentSchemas"].values():
            yield from record_properties(v)


def _metric(spec, where):
    if not isinstance(spec, dict) or not spec.keys() <= _METRIC_KEYS or \
            not isinstance(spec.get("unit"), str) or not spec["unit"] or \
            not isinstance(spec.get("source", ""), str):
        raise FieldError(f"{where}: {METRIC_KEY} is {{\"direction\": ..., \"unit\": \"...\"[, \"source\": FIELD]}}")
    try:
        return common.metric(spec.get("direction"), spec["unit"], spec.get("source"))
    except ValueError as e:
        raise FieldError(f"{where}: {e}") from None


def declared(fragment, origin):
    """({field: metrics.Metric}, {parameter fields}) that the fragment (a parsed suite fragment; origin
    names it in errors) declares on its record definitions. Raises FieldError on a malformed declaration,
    on a field declared both ways, on two declarations of one field that differ, and on a source that
    is not a field of the suite's records."""
    metrics, parameters, seen = {}, set(), set()
    defs = fragment.get("$defs", {}) if isinstance(fragment, dict) else {}
    name = fragment.get("suite") if isinstance(fragment, dict) else None
    for key, definition in defs.items():
        if not key.startswith(f"record_{name}"):
            continue
        for props in record_properties(definition):
            for field, spec in props.items():
                seen.add(field)
                if not isinstance(spec, dict):
                    continue
                where = f"{origin}: $defs/{key} {field}"
                if METRIC_KEY in spec:
                    m = _metric(spec[METRIC_KEY], where)
                    if metrics.setdefault(field, m) != m:
                        raise FieldError(f"{where}: declared again with another {METRIC_KEY}")
                if PARAMETER_KEY in spec:
                    if spec[PARAMETER_KEY] is not True:
                        raise FieldError(f"{where}: {PARAMETER_KEY} is true or absent")
                    parameters.add(field)
    for field in metrics.keys() & parameters:
        raise FieldError(f"{origin}: {field} is declared both a metric and a parameter")
    for field, m in metrics.items():
        if m.source is not None and m.source not in seen and m.source not in common.METRICS:
            raise FieldError(f"{origin}: the source {m.source} of metric {field} is no field of its records")
    return metrics, parameters
