"""Invariants every output keeps (tests/invariants.py), over every committed capture, and proof that
each checker catches a violation planted in a real output.

Each (capture, invariant) pair is one test.  The pairs that fail today are marked
xfail(strict=True) with what is wrong (#30): when a fix lands the test passes, strict xfail turns
that into a failure, and the mark must go.  The checkers themselves stay strict.
"""

from __future__ import annotations

import copy
import re

import pytest

from tests.captures import FAST_CAPTURES, committed_captures, readable
from tests.conftest import Lazy
from tests.invariants import (INVARIANTS, OUTPUTS, Outputs, host_rows, named_causes_add_up, parse_verdict,
                              row_label, verdict_sentences)

CAPTURES = committed_captures()

# What is wrong today, per (capture, invariant), each an xfail(strict) that flips to a failure when it
# is fixed.  Empty: every pair that was here (the host verdict's median, causes and rows; advice for
# graphs and compile already in use; a share over 100% with no "of what") passes since #30's fixes.
KNOWN_WRONG: dict[tuple[str, str], str] = {}


def cases() -> list:
    params = []
    for capture in CAPTURES:
        for invariant in INVARIANTS:
            marks = [] if capture in FAST_CAPTURES else [pytest.mark.slow]
            if (capture, invariant) in KNOWN_WRONG:
                marks.append(pytest.mark.xfail(strict=True, reason=f"#30: {KNOWN_WRONG[capture, invariant]}"))
            params.append(pytest.param(capture, invariant, marks=marks, id=f"{capture}-{invariant}"))
    return params


@pytest.fixture(scope="module")
def outputs() -> dict[str, Outputs]:
    """Every command's output per capture, made once for the module when a test first asks."""
    return Lazy(lambda capture: OUTPUTS[readable(CAPTURES[capture])])


@pytest.mark.parametrize("capture, invariant", cases())
def test_invariant_holds(outputs: dict[str, Outputs], capture: str, invariant: str) -> None:
    violations = INVARIANTS[invariant](outputs[capture])
    assert not violations, "\n".join(violations)


def test_known_wrong_names_real_pairs() -> None:
    """Every xfail mark names a committed capture and an invariant (a typo would mark nothing)."""
    assert {capture for capture, _ in KNOWN_WRONG} <= set(CAPTURES)
    assert {invariant for _, invariant in KNOWN_WRONG} <= set(INVARIANTS)


# -- planted violations: each checker catches one ------------------------------------------
# The bases are real outputs of two small captures: an nsys training loop (steps, syncs, a stall
# that lies outside the steps, short-kernel advice) and a Kineto one with Python stacks (host).
NSYS_BASE, HOST_BASE = "nsys/nsys2025_train_print", "kineto/mlp_print"


def planted(outputs: dict[str, Outputs], capture: str) -> Outputs:
    return copy.deepcopy(outputs[capture])


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3g} ms"


def consistent_verdict(out: Outputs) -> Outputs:
    """``out`` with each host verdict (``host``, ``host --steady``) rewritten the way the invariants
    want it (its table's top three rows with their figures, the claim their sum, the step the
    median), from the real tables: the base every host plant starts from, so each plant changes
    one thing."""
    median = out.steps["summary"]["median_ns"]
    findings = set(verdict_sentences(out))
    for _, host in out.hosts:
        host["summary"]["step_median_ns"] = host["verdict"]["step_ns"] = median
        host["summary"]["steady_steps"] = out.steps["summary"]["steady_count"]
        top = host_rows(host)[:3]
        named = sum(row["gpu_idle_ns_per_step"] for row in top)
        idle = host["summary"]["gpu_idle_ns_per_step"]
        causes = ", ".join(f"{row_label(row)} {ms(row['gpu_idle_ns_per_step'])}" for row in top)
        host["verdict"]["causes"] = [{"cause": "python", "label": row_label(row),
                                      "ns_per_step": row["gpu_idle_ns_per_step"],
                                      "pct": round(100 * row["gpu_idle_ns_per_step"] / median, 1)} for row in top]
        host["verdict"]["sentence"] = (f"Bound by Python/framework overhead: the GPU idles {ms(idle)} of the "
                                       f"{ms(median)} step, the host meanwhile in {causes}; these causes explain "
                                       f"{100 * named / median:.0f}% of the step time")
    out.report["findings"] = [text for text in out.report["findings"] if text not in findings]
    return out


@pytest.fixture
def nsys_out(outputs: dict[str, Outputs]) -> Outputs:
    return planted(outputs, NSYS_BASE)


@pytest.fixture
def host_out(outputs: dict[str, Outputs]) -> Outputs:
    out = consistent_verdict(planted(outputs, HOST_BASE))
    for invariant in ("one_median", "named_causes_add_up", "verdict_is_table_top", "no_own_frames"):
        assert INVARIANTS[invariant](out) == [], invariant
    return out


def test_consistent_verdict_parses_back(host_out: Outputs) -> None:
    """The sentence parser reads the three causes, the step and the claim back from the sentence."""
    verdict = parse_verdict(host_out.host["verdict"]["sentence"])
    assert [label for label, _ in verdict.causes] == [row_label(row) for row in host_rows(host_out.host)[:3]]
    assert verdict.step_ns == pytest.approx(host_out.steps["summary"]["median_ns"], rel=0.01)
    assert verdict.claim_of == "step" and verdict.claimed_pct is not None


def test_planted_mean_step_is_caught(nsys_out: Outputs, host_out: Outputs) -> None:
    assert INVARIANTS["one_median"](nsys_out) == []
    summary = nsys_out.steps["summary"]
    stats = nsys_out.report["sections"]["stalls"]["data"]["step_stats"]
    stats["median_ns"] = summary["mean_ns"] * 1.05  # the stalls section quoting another figure
    assert any("report stalls section" in v for v in INVARIANTS["one_median"](nsys_out))

    host_out.host["verdict"]["step_ns"] *= 1.05  # the verdict's step: a mean
    assert any("host verdict" in v for v in INVARIANTS["one_median"](host_out))


def test_planted_median_in_a_finding_is_caught(nsys_out: Outputs) -> None:
    median = nsys_out.steps["summary"]["median_ns"]
    nsys_out.report["findings"].append(f"20 steps, {ms(median * 1.2)} median (from the step ranges).")
    assert any("finding" in v for v in INVARIANTS["one_median"](nsys_out))


def test_planted_unaccounted_step_is_caught(nsys_out: Outputs) -> None:
    """A step in the count that is neither warm-up, steady, nor said to be left out."""
    assert INVARIANTS["step_counts_add_up"](nsys_out) == []
    steps = nsys_out.report["findings"]
    headline = next(i for i, text in enumerate(steps) if re.match(r"\d+ steps, ", text))
    count = nsys_out.steps["summary"]["count"]
    steps[headline] = steps[headline].replace(f"{count} steps, ", f"{count + 1} steps, ", 1)
    assert any("accounts for" in v for v in INVARIANTS["step_counts_add_up"](nsys_out))
    nsys_out.steps["steps"][-1]["phase"] = "teardown"  # a row moved out of the steady state, still counted
    assert any("its rows" in v for v in INVARIANTS["step_counts_add_up"](nsys_out))


def test_planted_steady_count_is_caught(nsys_out: Outputs) -> None:
    nsys_out.json["breakdown"][0]["window"]["steady_steps"] += 1
    assert any("breakdown --steady" in v for v in INVARIANTS["one_median"](nsys_out))


def test_planted_cost_outside_steps_is_caught(nsys_out: Outputs) -> None:
    """train_mlp.py:50's one torch.cuda.synchronize() lies before the steps (in_steps 0)."""
    assert INVARIANTS["steady_costs"](nsys_out) == []
    outside = next(row for row in nsys_out.json["stalls"]["rows"] if row["line"] == 50)
    assert outside["per_step"]["steps_with_sync"] == 0
    outside["per_step"]["gpu_idle_ns"] = outside["gpu_idle_ns"] / outside["per_step"]["steady_steps"]
    assert any("no sync in a steady step" in v for v in INVARIANTS["steady_costs"](nsys_out))


def test_planted_finding_priced_outside_steps_is_caught(nsys_out: Outputs) -> None:
    nsys_out.report["findings"].append("train_mlp.py:50 `torch.cuda.synchronize()` synchronizes 1 time, "
                                       "costing 0.0143 ms per step (1% of the median step time, 2.41 ms)")
    assert any("only outside the steady steps" in v for v in INVARIANTS["steady_costs"](nsys_out))


def test_planted_share_over_100_is_caught(nsys_out: Outputs) -> None:
    nsys_out.report["findings"].append("Synchronizations leave the GPU idle 4.9 ms per step (203%).")
    assert any("without saying of what" in v for v in INVARIANTS["steady_costs"](nsys_out))
    said = copy.deepcopy(nsys_out)
    said.report["findings"][-1] = "Memory copies took 89 ms of GPU time, 183% of the kernel time."
    assert INVARIANTS["steady_costs"](said) == []  # a share that says what it is of may exceed 100%
    nsys_out.json["steps"]["summary"]["steady_gpu_busy_pct"] = 140.0
    assert any("steady_gpu_busy_pct" in v for v in INVARIANTS["steady_costs"](nsys_out))


def test_planted_claim_is_caught(host_out: Outputs) -> None:
    verdict = host_out.host["verdict"]
    verdict["sentence"] = re.sub(r"explain \d+%", "explain 94%", verdict["sentence"])
    assert any("claims 94%" in v for v in named_causes_add_up(host_out))


def test_unreadable_verdict_is_caught(host_out: Outputs) -> None:
    """A verdict whose causes the parser cannot find fails: a rewording never passes unchecked."""
    host_out.host["verdict"]["sentence"] = "Bound by Python/framework overhead: mostly the backward pass."
    assert any("none can be read back" in v for v in named_causes_add_up(host_out))


def test_planted_verdict_off_the_table_is_caught(host_out: Outputs) -> None:
    rows = host_rows(host_out.host)
    sentence = host_out.host["verdict"]["sentence"]
    skipped = sentence.replace(f"{row_label(rows[1])} ", f"{row_label(rows[3])} ", 1)  # leaves out row 2
    host_out.host["verdict"]["sentence"] = skipped
    assert any("where its table's row is" in v for v in INVARIANTS["verdict_is_table_top"](host_out))
    figure = sentence.replace(f"{row_label(rows[1])} {ms(rows[1]['gpu_idle_ns_per_step'])}",
                              f"{row_label(rows[1])} {ms(rows[1]['gpu_idle_ns_per_step'] * 0.8)}")
    host_out.host["verdict"]["sentence"] = figure  # the right row with a figure of its own
    assert any("its table" in v and "gives" in v for v in INVARIANTS["verdict_is_table_top"](host_out))


def test_planted_own_frame_is_caught(host_out: Outputs) -> None:
    host_out.host["functions"].insert(0, {"function": "in_range", "file": "profkit/capture/sync_hook.py", "line": 88,
                                          "self_ns_per_step": 79e3, "inclusive_ns_per_step": 79e3,
                                          "gpu_idle_ns_per_step": 79e3})
    assert any("profkit's own code" in v for v in INVARIANTS["no_own_frames"](host_out))


def test_planted_raw_sync_text_is_caught(outputs: dict[str, Outputs]) -> None:
    out = planted(outputs, HOST_BASE)
    assert INVARIANTS["no_raw_sync_text"](out) == []
    out.report["findings"].append("The longest idle stretch: ranges: profkit.sync|item|train.py:30|print(loss.item())")
    assert INVARIANTS["no_raw_sync_text"](out) == ["report.json shows 'profkit.sync|'"]


def test_planted_graph_launches_make_graph_advice_wrong(nsys_out: Outputs) -> None:
    """train_print's findings advise '... or replaying them as a CUDA graph': right until the trace
    shows graph launches."""
    assert INVARIANTS["advice_not_done"](nsys_out) == []
    nsys_out.json["api"].append({"name": "cudaGraphLaunch_v10000", "instances": 20, "total_ns": 1000})
    assert any("launches graphs" in v for v in INVARIANTS["advice_not_done"](nsys_out))


def test_planted_triton_kernels_make_compile_advice_wrong(nsys_out: Outputs) -> None:
    nsys_out.json["kernels"].append({"name": "triton_poi_fused_gelu_0", "instances": 20, "total_ns": 1000})
    assert any("Triton kernels" in v for v in INVARIANTS["advice_not_done"](nsys_out))
