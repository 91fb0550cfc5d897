"""profkit's Kineto kernel totals against Holistic Trace Analysis on the same traces.

HTA (``holistictraceanalysis``, a test-only dependency installed by .ci/run)
is Meta's own reader of these traces.  Its ``get_gpu_kernel_breakdown`` gives
the total time per kernel name.

Where the two disagree, and who is right:

- HTA leaves out kernels it deems outside the traced iterations: those
  launched by no CPU-side call recorded in the trace, or launched after the
  last ``ProfilerStep#N`` ended (with ``include_last_profiler_step=False``,
  its default, also the whole last step).  That is an analysis choice, not
  what the trace holds; profkit, like ``nsys stats``, counts every kernel.
  The tests ask HTA to include the last step and compare the kernels HTA
  keeps, picked by that rule from the raw JSON.
- HTA takes every event whose args hold a ``stream`` for a GPU kernel.
  torch.compile's Triton launches are recorded as ``cpu_op`` events named
  after the kernel, with the launch stream in their args ("stream": 0), so
  HTA adds their CPU time to the kernel of that name (on gpt_compiled, a
  kernel of 77 µs GPU time gets 693 µs).  Only ``cat == "kernel"`` events
  ran on the GPU: profkit is right.  The oracle below adds those launcher
  events to HTA's side, and the test checks that this is the whole difference.
- HTA by default rounds every event
of a trace with sub-microsecond timestamps inward to whole microseconds
(start ``ceil(ts)``, end ``floor(ts + dur)``: its workaround for overlapping
events, pytorch/pytorch#122425), so each kernel instance loses up to 2 µs
and a kernel shorter than 1 µs can count 0 or less.  The trace records ns;
profkit keeps them (``round(ts*1000)``, ``round(dur*1000)``).  The tests
check both sides against the raw JSON: HTA's default totals equal that
rounding rule applied to the JSON, and with the rounding off
(``HTA_DISABLE_NS_ROUNDING=1``) HTA's totals equal profkit's to the ns.
"""

from __future__ import annotations

import math
import os
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from profkit.readers import open_trace
from tests.conftest import default_run
from tests.test_kineto_reader import KINETO_TRACES, complete, raw

# HTA takes seconds per trace: a schedule'd eager run, a torch.compile run (Triton
# launchers), and one with Python stacks; the reader itself is checked on every trace.
HTA_TRACES = [p for p in KINETO_TRACES if p.name.split(".")[0] in ("gpt_eager", "gpt_compiled", "mlp_print")] \
    or KINETO_TRACES[:1]
hta_analysis = pytest.importorskip("hta.trace_analysis", reason="HTA is a test-only dependency (.ci/run installs it)")
pytestmark = pytest.mark.skipif(not KINETO_TRACES, reason="no Kineto fixture committed yet")


def hta_kernel_totals(trace_file: Path, tmp_path: Path) -> dict[str, float]:
    """Total µs per kernel name from HTA's get_gpu_kernel_breakdown, no name folded into 'others'."""
    folder = tmp_path / "hta"
    folder.mkdir()
    shutil.copy(trace_file, folder / (trace_file.name if trace_file.name.endswith((".json", ".gz"))
                                      else trace_file.name + ".json"))
    analysis = hta_analysis.TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)
    _, per_kernel = analysis.get_gpu_kernel_breakdown(visualize=False, duration_ratio=1.0,
                                                      num_kernels=1 << 30, include_memory_kernels=False)
    return {str(name): float(total) for name, total in zip(per_kernel["name"], per_kernel["sum (us)"])}


def hta_kept(doc: dict[str, Any]) -> set[int]:
    """Correlation ids of the kernels HTA keeps (its Trace._filter_irrelevant_gpu_kernels
    with include_last_profiler_step=True), from the raw JSON: launched by a
    CPU-side call that began before the last ProfilerStep#N ended; every
    launched kernel when the trace has fewer than two steps."""
    launches = complete(doc, "cuda_runtime", "cuda_driver")
    steps = [e for e in complete(doc, "cpu_op", "user_annotation") if "ProfilerStep" in e["name"]]
    last_end = max((e["ts"] + e["dur"] for e in steps), default=math.inf)
    if len({e["name"] for e in steps}) < 2:
        last_end = math.inf
    return {e["args"]["correlation"] for e in launches if e["ts"] <= last_end and "correlation" in e["args"]}


def launcher_ops(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """cpu_op events that HTA counts as GPU kernels: args with an integer stream (not -1)."""
    return [e for e in complete(doc, "cpu_op")
            if isinstance(e.get("args", {}).get("stream"), int) and e["args"]["stream"] != -1]


def profkit_kernel_totals(trace_file: Path, kept: set[int]) -> dict[str, int]:
    k = open_trace(trace_file).table("kernels", ["name", "start", "end", "correlation"])
    totals: dict[str, int] = defaultdict(int)
    for name, start, end, correlation in zip(*(k[c].tolist() for c in k.columns)):
        if correlation in kept:
            totals[name] += end - start
    return dict(totals)


def hta_rounded_totals(doc: dict[str, Any], kept: set[int]) -> dict[str, int]:
    """HTA's default rule applied to the raw JSON: whole µs, start rounded up, end down."""
    totals: dict[str, int] = defaultdict(int)
    for e in complete(doc, "kernel"):
        if e["args"]["correlation"] in kept:
            totals[e["name"]] += math.floor(e["ts"] + e["dur"]) - math.ceil(e["ts"])
    return dict(totals)


@pytest.mark.parametrize("trace_file", default_run(HTA_TRACES), ids=lambda p: p.name)
def test_kernel_totals_equal_hta_to_the_ns(trace_file: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    hta = hta_kernel_totals(trace_file, tmp_path)
    doc = raw(trace_file)
    ours = profkit_kernel_totals(trace_file, hta_kept(doc))
    launchers: dict[str, int] = defaultdict(int)
    for e in launcher_ops(doc):
        launchers[e["name"]] += round(e["dur"] * 1000)
    assert set(hta) == set(ours) | set(launchers)
    for name in hta:
        # HTA sums float µs; profkit sums each instance's round(dur * 1000) ns
        expected_ns = ours.get(name, 0) + launchers.get(name, 0)
        assert abs(hta[name] * 1000 - expected_ns) < 0.5 + 1e-9 * expected_ns, name


@pytest.mark.parametrize("trace_file", HTA_TRACES[:1], ids=lambda p: p.name)
def test_hta_default_rounding_explains_the_difference(trace_file: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HTA_DISABLE_NS_ROUNDING", raising=False)
    hta = hta_kernel_totals(trace_file, tmp_path)
    doc = raw(trace_file)
    if not any(isinstance(e.get("ts"), float) and not e["ts"].is_integer() for e in complete(doc, "kernel")):
        pytest.skip("whole-µs timestamps: HTA does not round")
    kept = hta_kept(doc)
    rounded = hta_rounded_totals(doc, kept)
    for e in launcher_ops(doc):
        rounded[e["name"]] = rounded.get(e["name"], 0) + math.floor(e["ts"] + e["dur"]) - math.ceil(e["ts"])
    assert hta == {name: float(total) for name, total in rounded.items()}
    ours = profkit_kernel_totals(trace_file, kept)
    counts: dict[str, int] = defaultdict(int)
    for e in complete(doc, "kernel"):
        counts[e["name"]] += e["args"]["correlation"] in kept
    for name, total_ns in ours.items():  # at most 2 µs lost per instance, never gained
        if not any(e["name"] == name for e in launcher_ops(doc)):
            assert 0 <= total_ns - hta[name] * 1000 <= 2000 * counts[name], name


def test_hta_is_the_installed_test_dependency() -> None:
    assert os.path.basename(os.path.dirname(hta_analysis.__file__)) == "hta"
