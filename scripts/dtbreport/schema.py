"""The report schema, assembled: the common shell (harness/report.schema.json: context, suites[], checks[],
the shared record fields, the record dispatch) and one fragment per suite (suites/<suite>.schema.json, and
<suite>.schema.json in each $DTB_SUITE_PATH directory; registry.schema_fragments()).

A fragment is {"suite": NAME, "order": N, "$defs": {...}} whose $defs are the suite's: record_NAME (and
record_NAME_*), config_NAME and data_NAME. The suites go in the order of N. assemble() fills in every list of
suite names of the shell: the record dispatch by name prefix, the check's suite, the suite outcome's name and
data, the config's sections. Not a validator: scripts/validate_report.py validates with the result.
"""
import copy
import json
from pathlib import Path

from . import registry

SHELL_PATH = Path(__file__).resolve().parents[2] / "harness" / "report.schema.json"


class SchemaError(Exception):
    """A shell or fragment that cannot be read, or a fragment that breaks the contract above (one line)."""


def _read(path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SchemaError(f"{path}: cannot read the schema part: {e}") from None


def fragments():
    """[(suite, fragment)] in the fragments' order. Raises SchemaError on a fragment whose suite is not its
    file's name, whose order is not an integer, or whose $defs lack record_, config_ or data_<suite> or hold
    a definition of another name."""
    out = []
    for name, path in registry.schema_fragments().items():
        f = _read(path)
        defs = f.get("$defs") if isinstance(f, dict) else None
        if not isinstance(f, dict) or f.get("suite") != name or not isinstance(defs, dict):
            raise SchemaError(f"{path}: a suite's fragment is {{\"suite\": \"{name}\", \"order\": N, \"$defs\": {{...}}}}")
        if isinstance(f.get("order"), bool) or not isinstance(f.get("order"), int):
            raise SchemaError(f"{path}: 'order' must be an integer (where the suite goes among the others)")
        for k in (f"record_{name}", f"config_{name}", f"data_{name}"):
            if k not in defs:
                raise SchemaError(f"{path}: no $defs/{k}")
        for k in defs:
            if k not in (f"config_{name}", f"data_{name}") and k != f"record_{name}" and \
                    not k.startswith(f"record_{name}_"):
                raise SchemaError(f"{path}: $defs/{k} is not the suite's (record_{name}[_*], config_{name}, "
                                  f"data_{name})")
        out.append((f["order"], name, f))
    return [(name, f) for _, name, f in sorted(out, key=lambda x: (x[0], x[1]))]


# Fields that every measured record may carry, defined in the shell's record_base: the in-run calibration that
# the harness adds after each suite (suites/calibration.h). A record definition that lists its fields
# (additionalProperties false) allows them here, so that no fragment has to repeat them.
CALIBRATION_FIELDS = ("calibration", "real_time_cal")


def _allow_calibration(definition):
    bases = [a.get("$ref") for a in definition.get("allOf", []) if isinstance(a, dict)] \
        if isinstance(definition, dict) else []
    if "#/$defs/record_base" in bases and definition.get("additionalProperties") is False:
        for field in CALIBRATION_FIELDS:
            definition.setdefault("properties", {}).setdefault(field, True)


def assemble(shell_path=SHELL_PATH):
    """The whole report schema (a JSON object) from the shell at shell_path and every fragment. Raises
    SchemaError (see fragments(), and a definition of a fragment that the shell already has)."""
    s = copy.deepcopy(_read(shell_path))
    s.pop("$comment", None)
    d = s["$defs"]
    names = []
    for name, f in fragments():
        for k, v in f["$defs"].items():
            if k in d:
                raise SchemaError(f"$defs/{k} of suite {name} is already in {shell_path}")
            d[k] = copy.deepcopy(v)
            _allow_calibration(d[k])
        names.append(name)
        prefix = {"type": "string", "pattern": f"^{name}/"}
        d["record"]["allOf"].append({"if": {"properties": {"name": prefix}, "required": ["name"]},
                                     "then": {"$ref": f"#/$defs/record_{name}"}})
        d["suite_outcome"]["allOf"].append({
            "if": {"properties": {"name": {"const": name}, "status": {"enum": ["passed", "failed"]}},
                   "required": ["name", "status"]},
            "then": {"properties": {"data": {"$ref": f"#/$defs/data_{name}"}}}})
        d["check"]["allOf"].append({"if": {"properties": {"suite": {"const": name}}, "required": ["suite"]},
                                    "then": {"properties": {"name": {"pattern": f"^{name}/"}}}})
        d["config"]["properties"][name] = {"$ref": f"#/$defs/config_{name}"}
    d["record"]["properties"]["name"]["pattern"] = "^(" + "|".join(names) + ")/"
    for enum in (d["suite_outcome"]["properties"]["name"], d["check"]["properties"]["suite"],
                 d["config"]["properties"]["suites"]["items"]):
        enum["enum"] = list(names)
    d["config"]["required"] += names
    return s
