"""How a record field is read: a metric (its unit and which direction is better) or a parameter (it
identifies the record). This file holds the fields every suite's records share; a suite's own are declared
in its schema fragment (suites/<suite>.schema.json, x-metric and x-parameter: fields.py), and
registry.metrics() joins them.

direction: "lower" or "higher" is better (compare.py gates on it); "info" is reported when it changes but
never gates. unit: what the number counts ("time_unit": the record's own time_unit). source: for a scalar
computed from a timing object of the same record, that object's field, whose samples give its p-value
(None: no samples). A field whose value is a timing object ({n, median, ..., samples}) uses its own samples.
"""
from typing import NamedTuple, Optional

from .layout_keys import FIELD

LOWER, HIGHER, INFO = "lower", "higher", "info"


class Metric(NamedTuple):
    """One metric: direction (LOWER, HIGHER or INFO), unit, source (see above) and a note for readers."""
    direction: str
    unit: str
    source: Optional[str] = None
    note: str = ""


def metric(direction, unit, source=None, note=""):
    """A Metric; refuses a direction other than LOWER, HIGHER, INFO (ValueError)."""
    if direction not in (LOWER, HIGHER, INFO):
        raise ValueError(f"metric direction {direction!r} is not {LOWER}, {HIGHER} or {INFO}")
    return Metric(direction, unit, source, note)


# Metrics of several suites' records. real_time: Google Benchmark's time (in the record's time_unit);
# dtbench sets it to the median of the record's timing object; when it is (time_us, step_time_ms, ...),
# that object's row stands for it and real_time is not shown twice.
METRICS = {
    "real_time": metric(LOWER, "time_unit", note="Google Benchmark's time"),
    "step_time_ms": metric(LOWER, "ms", note="train, conformance, pipeline, offload, overlap, precision, recompute"),
    "tokens_per_s": metric(HIGHER, "tokens/s", "step_time_ms", "train, sweep"),
    # Reported when changed, never gated: accuracy (the checks gate it), fractions near zero whose
    # relative change means nothing, analytic figures.
    "final_loss": metric(INFO, "nats"),
    "comm_fraction": metric(INFO, "fraction", note="train, ffn_tp, sweep"),
    "bubble_theory": metric(INFO, "fraction", note="pipeline"),
    "skipped_steps": metric(INFO, "steps"),
    # The in-run calibration (suites/calibration.h): real_time over the reference kernel's time measured
    # beside it (sgemm, triad or the bare MPI loop; the record's `calibration` says which). Unitless. Shown,
    # not gated, by the two-report mode (real_time is; the A/B gate gates either, compare.py ab --calibrated).
    "real_time_cal": metric(INFO, "ratio", note="real_time / its calibration's time (docs/ci.md)"),
}

# Fields of Google Benchmark's record and of the parallel layout, which several suites' records carry.
PARAMETERS = {
    "name", "run_name", "run_type", "aggregate_name", "repetitions", "repetition_index", "threads",
    "iterations", "time_unit", "cpu_time", "family_index", "per_family_instance_index", "error_message", "label",
    "skipped", "skip_message", "world_size", "ranks", "idle_ranks",
    FIELD.tp, FIELD.dp, FIELD.pp, FIELD.ep, FIELD.schedule, FIELD.virtual_stages, FIELD.pipeline_layers, FIELD.zero_stage,
    FIELD.offload, FIELD.recompute, FIELD.precision, FIELD.cp, FIELD.cp_comm_type,
    "calibration",
}
