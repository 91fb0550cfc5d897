"""``profkit kernels|api|nvtx T --format json`` on Kineto traces equal the
statistics computed directly from the trace's raw JSON with plain Python.

Oracle per name: count, total, average, median, min, max and sample standard
deviation of ``round(dur * 1000)`` ns over the events of
``cat == "kernel"`` (kernels), ``cuda_runtime`` / ``cuda_driver`` (api) and
``user_annotation`` (nvtx: record_function ranges, ProfilerStep#N included;
profkit's sync-site ranges are labelled ``profkit.sync:<text>`` as nsys labels
the hook's NVTX domain).  avg, median and stddev are computed as doubles
(``statistics``) and rounded half up to 0.1 ns, as profkit prints them (nsys
2025's rounding); the standard deviation may differ by that one step.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from tests.conftest import default_run
from tests.test_kineto_reader import KINETO_TRACES, complete, raw

pytestmark = pytest.mark.skipif(not KINETO_TRACES, reason="no Kineto fixture committed yet")


def tenth(value: float) -> float:
    """Half up to 0.1 ns, of the double's exact value (the rounding profkit prints with)."""
    return float(Decimal(value).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def oracle(durations: dict[str, list[int]]) -> dict[str, dict[str, Any]]:
    rows = {}
    for name, values in durations.items():
        n, total = len(values), sum(values)
        rows[name] = {"instances": n, "total_ns": total, "avg_ns": tenth(total / n),
                      "med_ns": tenth(statistics.median(values)), "min_ns": min(values), "max_ns": max(values),
                      "stddev_ns": tenth(statistics.stdev(values)) if n > 1 else 0.0}
    return rows


def summary(command: str, trace_file: Path) -> dict[str, dict[str, Any]]:
    result = CliRunner().invoke(cli, [command, str(trace_file), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len({r["name"] for r in rows}) == len(rows)
    return {r["name"]: r for r in rows}


def check(got: dict[str, dict[str, Any]], expected: dict[str, dict[str, Any]]) -> None:
    assert set(got) == set(expected)
    grand = sum(r["total_ns"] for r in expected.values())
    for name, want in expected.items():
        row = got[name]
        for key in ("instances", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns"):
            assert row[key] == want[key], (name, key)
        # a square root: the last digit may round either way between two implementations
        assert math.isclose(row["stddev_ns"], want["stddev_ns"], abs_tol=0.1 + 1e-9), name
        assert math.isclose(row["time_pct"], 100 * want["total_ns"] / grand, abs_tol=0.05 + 1e-9), name


def durations(events: list[dict[str, Any]], label: Any = lambda e: e["name"]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for e in events:
        out[label(e)].append(round(e["dur"] * 1000))
    return out


@pytest.mark.parametrize("trace_file", default_run(KINETO_TRACES), ids=lambda p: p.name)
def test_kernels_api_nvtx_equal_the_raw_json(trace_file: Path) -> None:
    doc = raw(trace_file)
    kernels = complete(doc, "kernel")
    if kernels:
        check(summary("kernels", trace_file), oracle(durations(kernels)))
    api = complete(doc, "cuda_runtime", "cuda_driver")
    if api:
        check(summary("api", trace_file), oracle(durations(api)))
    ranges = complete(doc, "user_annotation")
    if ranges:
        label = lambda e: f"profkit.sync:{e['name']}" if e["name"].startswith("profkit.sync|") else e["name"]  # noqa: E731
        got = summary("nvtx", trace_file)
        assert {r["style"] for r in got.values()} == {"PushPop"}
        check(got, oracle(durations(ranges, label)))
