#!/usr/bin/env python3
"""ctest record_fields: a suite's record fields are declared once, in its schema fragment
(scripts/dtbreport/fields.py), and report.py and compare.py read them from there.

Checked without a build: every fragment's declarations read (registry.metrics for each suite, the
parameters); every field of every record definition is a metric or a parameter (declared in the fragment,
or a common one of dtbreport/metrics.py), apart from the fields listed in UNDECLARED, which compare.py
shows as unknown fields, never gated; every unit('FIELD', SUITE) a suite module's table asks for is a
declared metric of that suite; and a malformed declaration or a module that still sets METRICS is refused.
That the C++ writer writes exactly the declared fields is ctest report_schema's (the schema is strict).
"""
import json
import os
import re
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from dtbreport import fields, registry  # noqa: E402

# Record fields that no declaration covers yet; compare.py reports their numbers as unknown fields (info,
# never gated). Declaring one (x-metric or x-parameter in its fragment) changes what compare.py does with
# it, so each is a decision of its own; a new field is declared instead.
UNDECLARED = {
    "conformance": {"sequence_parallel", "dp_allreduce", "dp_allreduce_ranks_per_node"},
    "memory": {"sequence_parallel"},
    "moe": {"time_ms", "memory_per_rank"},
    "pipeline": {"t_weight_us"},
    "precision": {"grad_norms"},
    "sweep": {"sequence_parallel", "all_to_all_fraction"},
    "train": {"sequence_parallel", "dp_allreduce", "dp_allreduce_ranks_per_node"},
}


def record_fields(fragment):
    """{field} of the fragment's record definitions (fields.py's scope), without those it forbids."""
    name = fragment["suite"]
    return {f for k, d in fragment["$defs"].items() if k.startswith(f"record_{name}")
            for props in fields.record_properties(d) for f, spec in props.items() if spec is not False}


class Declarations(unittest.TestCase):
    def test_every_record_field_is_declared(self):
        parameters = registry.parameters()
        for name, path in registry.schema_fragments().items():
            with self.subTest(suite=name):
                metrics = registry.metrics(name)
                fragment = json.loads(path.read_text(encoding="utf-8"))
                undeclared = {f for f in record_fields(fragment) if f not in metrics and f not in parameters}
                self.assertEqual(undeclared, UNDECLARED.get(name, set()),
                                 f"{path}: declare each record field with x-metric or x-parameter "
                                 f"(scripts/dtbreport/fields.py)")

    def test_every_suite_declares_its_metrics(self):
        for name in registry.suites():
            with self.subTest(suite=name):
                self.assertIn(name, registry.schema_fragments())
                own = {f for f in registry.metrics(name) if f not in registry.common.METRICS}
                self.assertTrue(own, f"{name} declares no metric of its own")

    def test_table_units_are_declared(self):
        pattern = re.compile(r"unit\(['\"](\w+)['\"], SUITE\)")
        for name, mod in registry.suites().items():
            asked = set(pattern.findall(Path(mod.__file__).read_text(encoding="utf-8")))
            with self.subTest(suite=name):
                self.assertLessEqual(asked, set(registry.metrics(name)),
                                     f"{mod.__file__} asks for the unit of a field its fragment does not declare")


class Refusals(unittest.TestCase):
    BASE = {"suite": "s", "$defs": {"record_s": {"properties": {
        "time_us": {"x-metric": {"direction": "lower", "unit": "us"}},
        "rate": {"x-metric": {"direction": "higher", "unit": "1/s", "source": "time_us"}},
        "n": {"x-parameter": True}}}}}

    def declare(self, **props):
        f = json.loads(json.dumps(self.BASE))
        f["$defs"]["record_s"]["properties"].update(props)
        return fields.declared(f, "s.schema.json")

    def test_reads_a_declaration(self):
        metrics, parameters = self.declare()
        self.assertEqual((metrics["rate"].direction, metrics["rate"].unit, metrics["rate"].source),
                         ("higher", "1/s", "time_us"))
        self.assertEqual(parameters, {"n"})

    def test_refuses_malformed(self):
        bad = [{"x-metric": {"direction": "up", "unit": "us"}},
               {"x-metric": {"direction": "lower"}},
               {"x-metric": {"direction": "lower", "unit": "us", "better": "lower"}},
               {"x-metric": {"direction": "lower", "unit": "us", "source": "no_such_field"}},
               {"x-metric": {"direction": "lower", "unit": "us"}, "x-parameter": True},
               {"x-parameter": "yes"}]
        for spec in bad:
            with self.subTest(spec=spec), self.assertRaises(fields.FieldError):
                self.declare(x=spec)

    def test_refuses_two_declarations_that_differ(self):
        f = json.loads(json.dumps(self.BASE))
        f["$defs"]["record_s_other"] = {"properties": {"time_us": {"x-metric": {"direction": "lower",
                                                                                "unit": "ms"}}}}
        with self.assertRaises(fields.FieldError):
            fields.declared(f, "s.schema.json")

    def test_refuses_a_module_with_metrics(self):
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "old.py").write_text('SUITE = "old"\nMETRICS = {}\n\ndef render(r, recs, cs, data):\n'
                                              '    pass\n', encoding="utf-8")
            old = os.environ.get(registry.ENV)
            os.environ[registry.ENV] = tmp
            try:
                with self.assertRaisesRegex(registry.RegistryError, "schema fragment"):
                    registry.suites()
            finally:
                if old is None:
                    del os.environ[registry.ENV]
                else:
                    os.environ[registry.ENV] = old


if __name__ == "__main__":
    unittest.main()
