"""The suites scripts/report.py, scripts/compare.py and the schema assembler know: every module in
dtbreport/suites/ and in the directories of $DTB_SUITE_PATH (os.pathsep-separated), found by scanning.

A suite module is a file <suite>.py that sets SUITE (its name, the first part of its record names) and
defines render(r, recs, cs, data); it may set PLOTS (the names of the PNG files it writes, STEM-NAME.png).
Its schema fragment is <suite>.schema.json in suites/ beside the C++ file, or beside the module in a
$DTB_SUITE_PATH directory; the fragment declares which record fields are metrics (unit, direction) and
which are parameters (fields.py), so a module sets neither. Nothing here lists suites.
"""
import functools
import importlib.util
import json
import os
from pathlib import Path

from . import fields
from . import metrics as common

PACKAGE_SUITES = Path(__file__).resolve().parent / "suites"
ENV = "DTB_SUITE_PATH"


class RegistryError(Exception):
    """A suite module or fragment that breaks the contract above (no SUITE, a name taken twice, METRICS or
    PARAMETERS in a module, a common metric redeclared, a malformed field declaration: fields.py)."""


def extra_dirs():
    """The directories of $DTB_SUITE_PATH, in order (empty entries skipped)."""
    return [Path(p) for p in os.environ.get(ENV, "").split(os.pathsep) if p]


def _load(path, prefix):
    spec = importlib.util.spec_from_file_location(f"{prefix}.{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@functools.lru_cache(maxsize=None)
def _suites(dirs):
    out = {}
    for i, d in enumerate(dirs):
        prefix = "dtbreport.suites" if i == 0 else f"dtbreport_extra{i}"
        for path in sorted(Path(d).glob("*.py")):
            if path.name.startswith("_") or path.name.endswith("_test.py"):
                continue
            mod = _load(path, prefix)
            name = getattr(mod, "SUITE", None)
            if not isinstance(name, str) or not callable(getattr(mod, "render", None)):
                raise RegistryError(f"{path}: a suite module sets SUITE and defines render(r, recs, cs, data)")
            if name in out:
                raise RegistryError(f"{path}: suite {name} is already defined by {out[name].__file__}")
            for old in ("METRICS", "PARAMETERS"):
                if hasattr(mod, old):
                    raise RegistryError(f"{path}: {old} is declared in the suite's schema fragment "
                                        f"({fields.METRIC_KEY}, {fields.PARAMETER_KEY}: dtbreport/fields.py)")
            out[name] = mod
    return out


def suites():
    """{suite name: its module}, the package's suites first, by file name, then $DTB_SUITE_PATH's."""
    return _suites(tuple(str(d) for d in [PACKAGE_SUITES] + extra_dirs()))


def metrics(suite=None):
    """{field: metrics.Metric} for the record fields of SUITE that are metrics: the common ones (metrics.py)
    and those its schema fragment declares (fields.py). For a suite without a fragment (or None), the
    common ones and every suite's, the first fragment's declaration of a field winning. Raises
    RegistryError when a fragment redeclares a common metric or declares a field malformed."""
    return _metrics(_fragment_key(), suite if suite in schema_fragments() else None)


def _fragment_key():
    return tuple((name, str(path)) for name, path in schema_fragments().items())


@functools.lru_cache(maxsize=None)
def _declared(name, path):
    try:
        fragment = json.loads(Path(path).read_text(encoding="utf-8"))
        return fields.declared(fragment, path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, fields.FieldError) as e:
        raise RegistryError(f"{path}: cannot read the suite's field declarations: {e}") from None


@functools.lru_cache(maxsize=None)
def _metrics(fragments, suite):
    out = dict(common.METRICS)
    for name, path in fragments:
        if suite is not None and name != suite:
            continue
        for f, m in _declared(name, path)[0].items():
            if f in common.METRICS:
                raise RegistryError(f"{path}: metric {f} of suite {name} is already declared in "
                                    f"dtbreport/metrics.py")
            out.setdefault(f, m)
    return out


def parameters():
    """Every record field that identifies a record or says how it was measured (never a metric): the common
    ones (metrics.py) and those each suite's fragment declares."""
    return _parameters(_fragment_key())


@functools.lru_cache(maxsize=None)
def _parameters(fragments):
    out = set(common.PARAMETERS)
    for name, path in fragments:
        out |= _declared(name, path)[1]
    return frozenset(out)


def plots():
    """The PNG names (STEM-NAME.png) the suite modules may write."""
    return sorted({p for mod in suites().values() for p in getattr(mod, "PLOTS", ())})


def schema_fragments():
    """{suite: path of its schema fragment}: suites/<suite>.schema.json at the repository's root, and
    <suite>.schema.json in each $DTB_SUITE_PATH directory."""
    root = Path(__file__).resolve().parents[2] / "suites"
    out = {}
    for d in [root] + extra_dirs():
        for path in sorted(Path(d).glob("*.schema.json")):
            name = path.name[:-len(".schema.json")]
            if name in out:
                raise RegistryError(f"{path}: the schema fragment of suite {name} is already {out[name]}")
            out[name] = path
    return out


def unit(field, suite=None):
    """The unit a metric is declared with (metrics.py or SUITE's fragment), for a column header: 'ms' for
    step_time_ms. Raises KeyError for a field that is not a metric."""
    return metrics(suite)[field].unit
