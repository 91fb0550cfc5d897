"""`profkit diff` and the noise model, on real captures of the same program."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from profkit.analysis.compare import noise
from profkit.cli import cli
from profkit.report.diff import GITHUB_COMMENT_LIMIT
from tests.conftest import nsys_fixture

PRINT = "nsys2025_train_print"      # MLP loop with print(loss.item()) each step (train_mlp.py:59)
NOPRINT = "nsys2025_train_noprint"  # the same loop without it


def test_mann_whitney_equals_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    for a, b in [(rng.normal(0, 1, 40), rng.normal(0.4, 1, 33)),
                 (np.round(rng.normal(5, 1, 25)), np.round(rng.normal(5, 1, 30))),  # many ties
                 (np.arange(5.0), np.arange(3.0, 9.0))]:
        expected = scipy_stats.mannwhitneyu(a, b, method="asymptotic", use_continuity=True).pvalue
        assert noise.mann_whitney_p(a, b) == pytest.approx(expected, rel=1e-9)


def test_noise_is_no_change_and_a_shift_is_slower():
    rng = np.random.default_rng(3)
    base = rng.normal(10.0, 0.3, 30)
    assert noise.compare(base, rng.normal(10.0, 0.3, 30)).verdict == noise.NO_CHANGE
    slower = noise.compare(base, base * 1.06)
    assert slower.verdict == noise.SLOWER and slower.ci_low_pct > 0
    # a real but tiny change is not a regression
    assert noise.compare(base, base * 1.005).verdict == noise.NO_CHANGE
    assert noise.compare(base[:2], base[:2] * 2).verdict == noise.UNKNOWN  # too few samples: no interval


def _diff(base: str, new: str, *extra: str):
    return CliRunner().invoke(cli, ["diff", str(nsys_fixture(base)), str(nsys_fixture(new)), *extra])


def test_print_adds_a_sync_site_at_the_print_line():
    result = _diff(NOPRINT, PRINT, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data["step"]) >= {"base_median_ns", "new_median_ns", "delta_pct", "ci_low_pct", "ci_high_pct",
                                 "verdict"}
    added = [s for s in data["syncs"] if s["status"] == "added"]
    assert any(s["source"].endswith("train_mlp.py:59") for s in added), added
    assert all(s["new_count"] > 0 and s["base_count"] == 0 for s in added)
    for row in data["kernels"]:
        assert set(row) >= {"name", "base_ns_per_step", "new_ns_per_step", "delta_ns_per_step", "status"}
        assert row["status"] in {"new", "gone", "slower", "faster", "same"}


def test_a_trace_against_itself_is_no_change():
    data = json.loads(_diff(PRINT, PRINT, "--format", "json").output)
    assert data["step"]["verdict"] == "no change"
    assert data["step"]["delta_pct"] == 0
    assert {k["status"] for k in data["kernels"]} == {"same"}
    assert all(s["status"] == "same" for s in data["syncs"])


def test_markdown_comment_leads_with_the_verdict_and_fits():
    result = _diff(NOPRINT, PRINT, "--format", "md")
    assert result.exit_code == 0
    text = result.output
    assert text.startswith("### profkit diff: ")
    assert "<details>" in text and len(text) < GITHUB_COMMENT_LIMIT
    assert text.index("Step time") < text.index("<details>")


def test_fail_on_regression_sets_exit_code():
    data = json.loads(_diff(NOPRINT, PRINT, "--format", "json").output)
    result = _diff(NOPRINT, PRINT, "--fail-on-regression", "0")
    assert result.exit_code == (1 if data["step"]["verdict"] == "slower" else 0)
    assert _diff(PRINT, PRINT, "--fail-on-regression", "0").exit_code == 0


def test_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{\"not\": \"a trace\"}")
    result = CliRunner().invoke(cli, ["diff", str(bad), str(nsys_fixture(PRINT))])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


# -- torch.profiler traces (tests/data/kineto, made on an H100; see its README) --------------
KINETO = Path(__file__).parent / "data" / "kineto"
REVIEW = KINETO / "review"  # the GPU-bound MLP runs and the gpt inductor cache (see its README)
needs_kineto = pytest.mark.skipif(not (KINETO / "gpt_eager.json.gz").exists(), reason="Kineto fixtures missing")


def _kineto(name: str) -> Path:
    return (REVIEW if name.startswith("mlp_gpu") else KINETO) / f"{name}.json.gz"


def _kdiff(base: str, new: str, *extra: str) -> dict:
    result = CliRunner().invoke(cli, ["diff", str(_kineto(base)), str(_kineto(new)), "--format", "json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@needs_kineto
def test_print_in_a_gpu_bound_loop_is_slower_with_a_ci_that_excludes_0():
    data = _kdiff("mlp_gpu_noprint", "mlp_gpu_print")
    step = data["step"]
    assert step["verdict"] == "slower" and step["ci_low_pct"] > 0, step
    # These traces were made by torch.profiler alone (with_stack), without profkit's sync hook:
    # Kineto's stacks give the enclosing frame's line, not the call's (see PYTHON_SITES in
    # profkit/model/schema.py), so the site is main() in train_mlp.py; the nsys captures with
    # the hook pin it to line 59 (test_print_adds_a_sync_site_at_the_print_line).
    added = [s for s in data["syncs"] if s["status"] == "added"]
    assert [s["api"] for s in added if s["source"].startswith("train_mlp.py:")] == \
        ["cudaMemcpyAsync + cudaStreamSynchronize"], data["syncs"]
    assert added[0]["new_count"] >= data["step"]["new_steps"]  # one per step at least


@needs_kineto
def test_two_runs_of_one_program_are_no_change():
    assert _kdiff("mlp_gpu_noprint", "mlp_gpu_noprint_b")["step"]["verdict"] == "no change"


@needs_kineto
def test_two_runs_that_really_differ_are_told_apart():
    """Two runs of one launch-bound program on a loaded CPU (mlp_noprint, mlp_noprint_b): their own
    ProfilerStep#N ranges (the JSON, tests/zoo/truth.py) have steady medians 2.79 and 3.80 ms, the
    second run 36% slower throughout.  diff says slower, with medians within 3% of those."""
    import statistics

    from tests.zoo.truth import truth_of

    truths = [statistics.median(truth_of(KINETO / f"{name}.json.gz").step_ns[3:]) for name in ("mlp_noprint",
                                                                                                "mlp_noprint_b")]
    step = _kdiff("mlp_noprint", "mlp_noprint_b")["step"]
    assert step["verdict"] == "slower" and step["ci_low_pct"] > 0
    assert step["base_median_ns"] == pytest.approx(truths[0], rel=0.03)
    assert step["new_median_ns"] == pytest.approx(truths[1], rel=0.03)


@needs_kineto
def test_compiled_is_faster_and_its_triton_kernels_are_new_with_their_code(tmp_path):
    import tarfile

    with tarfile.open(REVIEW / "gpt_compiled_inductor_cache.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    # inductor replaces most kernels: eager and compiled share 36% of their kernel names, but both
    # annotate the same 'train_step' (one script), so they are compared, and a note says so (issue 30)
    data = _kdiff("gpt_eager", "gpt_compiled", "--inductor", str(tmp_path))
    assert any("share 36% of their kernel names" in n for n in data["notes"]), data["notes"]
    assert data["step"]["verdict"] == "faster"
    new = [k for k in data["kernels"] if k["status"] == "new"]
    gone = [k for k in data["kernels"] if k["status"] == "gone"]
    triton = [k for k in new if k["name"].startswith("triton_")]
    assert triton and all(k["name"].startswith("triton_") or "triton" not in k["name"] for k in new)
    for k in triton:  # each new Triton kernel with its registers and vectorization verdict
        assert k["registers"] and k["registers"] > 0, k
        assert k["vectorization"] in {"full", "mostly", "partly", "none", "no global memory"}, k
    # eager's unfused elementwise kernels (GELU, its backward, layer norm pieces) are gone
    assert any("elementwise_kernel" in k["name"] for k in gone), [k["name"][:60] for k in gone]


# -- one loop under two profilers (tests/data/kineto/README.md: the same programs under nsys 2025.3) --
@needs_kineto
@pytest.mark.parametrize("nsys_name, kineto_name, options", [
    ("nsys2025_gpt_eager", "gpt_eager", "record_shapes"),                  # README: record_shapes=True
    ("nsys2025_mlp_nvtx", "mlp_annotated", "record_shapes"),
    ("nsys2025_mlp_plain", "mlp_print", "with_stack and record_shapes"),  # --with-stack
])
def test_nsys_against_kineto_of_one_loop_no_kernel_is_new_or_gone(nsys_name, kineto_name, options):
    args = ["diff", str(nsys_fixture(nsys_name)), str(_kineto(kineto_name))]
    data = json.loads(CliRunner().invoke(cli, [*args, "--format", "json"]).output)
    # every kernel of one spelling matches the other's: none is both "gone" (nsys's spelling) and "new"
    assert not [k["name"] for k in data["kernels"] if k["status"] in ("new", "gone")]
    assert data["profilers"]["base"] == {"profiler": "nsys", "overhead": []}
    text = CliRunner().invoke(cli, args)
    assert text.exit_code == 0, text.output
    first = text.output.splitlines()[0]
    assert first.startswith(f"Different profilers: BASE ({nsys_name}.sqlite) is an nsys export, NEW "
                            f"({kineto_name}.json.gz) is a torch.profiler trace with {options}; NEW ran under "
                            "torch.profiler's overhead"), first
    md = CliRunner().invoke(cli, [*args, "--format", "md"]).output
    assert md.splitlines()[0].startswith("> ⚠️ Different profilers:")


def test_two_nsys_traces_have_no_profiler_note():
    data = json.loads(_diff(NOPRINT, PRINT, "--format", "json").output)
    assert data["profilers"]["note"] is None


@needs_kineto
def test_table_shows_the_verdict_top_changes_and_the_sync_site_change_and_csv_has_them():
    import csv
    import io

    args = ["diff", str(_kineto("mlp_gpu_print")), str(_kineto("mlp_print"))]
    data = json.loads(CliRunner().invoke(cli, [*args, "--format", "json"]).output)
    site = next(s for s in data["syncs"] if s["source"] == "train_mlp.py:62" and s["status"] == "changed")
    # both runs print loss.item() once per step: the counts follow the steps each trace holds
    assert site["base_count"] >= data["step"]["base_steps"] and site["new_count"] >= data["step"]["new_steps"]
    lines = CliRunner().invoke(cli, args).output.splitlines()
    assert lines[0].startswith("Step time: faster")
    assert (f"  - sync site changed: train_mlp.py:62 (cudaMemcpyAsync + cudaStreamSynchronize, "
            f"{site['base_count']} → {site['new_count']})") in lines
    assert sum(line.startswith("  - kernel ") for line in lines) >= 4
    rows = list(csv.DictReader(io.StringIO(CliRunner().invoke(cli, [*args, "--format", "csv"]).output)))
    assert [r["kind"] for r in rows].count("kernel") == len(data["kernels"])
    assert rows[0]["kind"] == "step" and rows[0]["status"] == "faster"
    sync = next(r for r in rows if r["kind"] == "sync" and r["name"] == "train_mlp.py:62" and r["status"] == "changed")
    assert (int(sync["base"]), int(sync["new"])) == (site["base_count"], site["new_count"])


def _kernel_ns_per_step(name: str) -> float:
    """The truth from the JSON: the median over steady ProfilerStep#N ranges (the first three are
    warm-up, as in test_two_runs_that_really_differ_are_told_apart) of the kernel time that starts in each."""
    import gzip
    import statistics

    with gzip.open(_kineto(name), "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    kernels = [e for e in events if e.get("cat") == "kernel"]
    per_step = [sum(k["dur"] for k in kernels if lo <= k["ts"] < hi) * 1e3 for lo, hi in steps[3:-1]]
    return statistics.median(per_step)


@needs_kineto
def test_a_slower_kernel_fails_the_kernel_gate_and_a_busier_host_does_not():
    """hist_run4 adds a ~1 ms spin kernel per step to hist_run1's program.  Its step time moves
    +9%, inside the run's own spread, so the step-time gate lets it pass; the GPU kernel time per
    step moves from ~0.2 to ~1.2 ms (the JSON's kernel events) and the kernel gate fails it.
    mlp_noprint_b is the same program as mlp_noprint on a busier host: step time +37%,
    kernel time unchanged, and the kernel gate passes it."""
    runner = CliRunner()
    spin = runner.invoke(cli, ["diff", str(_kineto("hist_run1")), str(_kineto("hist_run4")), "--format", "json",
                               "--fail-on-kernel-regression", "50"])
    assert spin.exit_code == 1, spin.output
    assert "GPU kernel time per step regressed" in spin.stderr
    kernel_time = json.loads(spin.stdout)["kernel_time"]
    assert kernel_time["verdict"] == "slower"
    for side, name in (("base", "hist_run1"), ("new", "hist_run4")):
        assert kernel_time[f"{side}_median_ns"] == pytest.approx(_kernel_ns_per_step(name), rel=0.05)
    busy = runner.invoke(cli, ["diff", str(_kineto("mlp_noprint")), str(_kineto("mlp_noprint_b")),
                               "--fail-on-kernel-regression", "5"])
    assert busy.exit_code == 0, busy.output
    assert "GPU kernel time per step: no change" in " ".join(busy.output.split())


def test_a_gate_that_cannot_decide_says_so(tmp_path):
    """Two exports of two steps each: no interval, so the verdict is "unknown", not "no change",
    and a gate on it exits 2 with one line instead of passing."""
    base, new = nsys_fixture("nsys2025_gelu"), nsys_fixture("nsys2023_vector_add")
    plain = CliRunner().invoke(cli, ["diff", str(base), str(new), "--force", "--format", "json"])
    assert plain.exit_code == 0, plain.output
    step = json.loads(plain.output)["step"]
    assert min(step["base_steps"], step["new_steps"]) < noise.MIN_SAMPLES <= max(step["base_steps"], step["new_steps"])
    assert step["verdict"] == "unknown" and "too few samples" in step["why"]
    gated = CliRunner().invoke(cli, ["diff", str(base), str(new), "--force", "--fail-on-regression", "5"])
    assert gated.exit_code == 2 and "cannot gate on step time" in gated.output
    assert "Traceback" not in gated.output


@needs_kineto
def test_an_item_and_a_device_synchronize_on_one_line_are_two_sites():
    """mlp_print's stacks put its 17 .item() syncs (cudaStreamSynchronize) and the profiler's own
    cudaDeviceSynchronize (under prof.step()) on one line of main(); mlp_noprint has only the second.
    The diff used to say the device synchronize was removed (1 -> 0) and 18 .item() syncs added."""
    import gzip
    from collections import Counter

    with gzip.open(_kineto("mlp_print"), "rt") as fh:
        calls = Counter(e["name"] for e in json.load(fh)["traceEvents"]
                        if e.get("cat") == "cuda_runtime" and "Synchronize" in e.get("name", ""))
    syncs = {(s["api"], s["status"]): (s["base_count"], s["new_count"])
             for s in _kdiff("mlp_noprint", "mlp_print")["syncs"]}
    assert syncs[("cudaDeviceSynchronize", "same")] == (1, calls["cudaDeviceSynchronize"])
    assert syncs[("cudaMemcpyAsync + cudaStreamSynchronize", "added")] == (0, calls["cudaStreamSynchronize"])


def test_a_folder_of_rank_traces_diffs_one_rank_and_needs_it():
    folder, slow = KINETO.parent / "ddp" / "kineto", KINETO.parent / "ddp" / "kineto_slow"
    one = CliRunner().invoke(cli, ["diff", str(folder), str(slow), "--rank", "1", "--format", "json"])
    assert one.exit_code == 0, one.output
    assert json.loads(one.output)["step"]["base_median_ns"] > 0
    both = CliRunner().invoke(cli, ["diff", str(folder), str(slow)])
    assert both.exit_code == 2 and "pass --rank N" in both.output


@needs_kineto
def test_the_same_file_twice_says_so():
    data = _kdiff("mlp_print", "mlp_print")
    assert any("the same file" in note for note in data["notes"])


def test_a_base_median_of_zero_is_unknown_not_a_crash():
    """GPU kernel time per step can be 0 in most steps (a loop whose kernels ran in warm-up only):
    a change relative to a median of 0 has no meaning, and resampling it used to raise."""
    from profkit.analysis.compare.diff import kernel_time_change
    import pandas as pd

    assert noise.compare(np.zeros(10), np.zeros(10)).verdict == noise.UNKNOWN
    assert noise.compare(np.array([0.0] * 9 + [5.0]), np.array([1.0] * 10)).verdict == noise.UNKNOWN
    empty = pd.DataFrame({"name": [], "step": [], "ns": []})
    one = pd.DataFrame({"name": ["k"], "step": [0], "ns": [1000.0]})
    change = kernel_time_change(empty, one, 10, 10)
    assert change["verdict"] == noise.UNKNOWN and "0" in change["why"]
