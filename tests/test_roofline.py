"""profkit roofline on real ncu captures (H100, tests/data/roofline/).

Oracles are never profkit's own output: 2*M*N*K of the GEMM shapes the probe
ran (<report>.cases.json), ncu's own derived metrics (dram__bytes.sum.per_second,
sm__pipe_tensor_cycles_active, gpu__dram_throughput) and the minimum bytes an
operation must move."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from profkit.analysis.roofline import CAPTURE_HINT, aggregate, roofline
from profkit.readers.ncu import read_launches
from profkit.analysis.roofline.counters import read_counters
from profkit.cli import cli
from profkit.readers.ncu import launches_from_csv, nvtx_ranges, read_csv_file
from profkit.readers.ncu.units import parse_value
from tests.conftest import DATA

ROOF = DATA / "roofline"
L2_BYTES = 52_428_800  # the H100's L2 (device__attribute_l2_cache_size of these captures)


def _csv(report: str, page: str = "raw"):
    return ROOF / f"{report}_{page}.csv.xz"


def _ncu_metric(report: str, name: str) -> list[float]:
    """ncu's own value of a metric, per launch, straight from the raw page's cells."""
    table = read_csv_file(_csv(report))
    out = []
    for raw in table.launches:
        row = raw.metrics[name]
        out.append(parse_value(row.value, row.unit).value)
    return out


def _cases(report: str) -> list[dict]:
    return json.loads((ROOF / f"{report}.cases.json").read_text())["cases"]


GEMMS = [("gemm_fp32", "fp32"), ("gemm_bf16", "bf16 tensor"), ("gemm_fp8", "fp8 tensor")]


@pytest.mark.parametrize(("report", "roof"), GEMMS)
def test_gemm_flops_match_2mnk_and_bound_compute_on_the_right_roof(report, roof):
    (case,) = _cases(report)
    assert case["flops"] == 2 * case["M"] * case["N"] * case["K"]
    (row,) = roofline(read_launches(_csv(report))).launches
    (duration_ns,) = _ncu_metric(report, "gpu__time_duration.sum")
    expected = case["flops"] / (duration_ns / 1e9)
    assert row.achieved_flops_per_s == pytest.approx(expected, rel=0.05)
    assert row.bound == "compute"
    assert row.roof == roof
    assert row.verdict.startswith("compute-bound")


@pytest.mark.parametrize("report", ["gemm_bf16", "gemm_fp8"])
def test_tensor_roof_pct_equals_ncus_tensor_pipe_utilization(report):
    # peaks from peak_sustained x clock must agree with ncu's own % of the tensor pipe's peak
    (row,) = roofline(read_launches(_csv(report))).launches
    (pipe_pct,) = _ncu_metric(report, "sm__pipe_tensor_cycles_active.sum.pct_of_peak_sustained_elapsed")
    assert row.pct_of_roof == pytest.approx(pipe_pct, abs=1.0)
    assert row.pct_of_roof > 85


def test_fp32_gemm_is_measured_on_the_fma_pipe_not_tensor_cores():
    (row,) = roofline(read_launches(_csv("gemm_fp32"))).launches
    assert not any("tensor" in roof and flops for roof, flops in row.flops_by_roof.items())
    (ffma,) = _ncu_metric("gemm_fp32", "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum")
    assert row.flops_by_roof["fp32"] == pytest.approx(2 * ffma)


@pytest.mark.parametrize("report", ["memory", "gelu", "softmax"])
def test_memory_kernels_are_memory_bound_at_ncus_dram_rate(report):
    rows = roofline(read_launches(_csv(report))).launches
    ncu_rate = _ncu_metric(report, "dram__bytes.sum.per_second")
    ncu_pct = _ncu_metric(report, "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")
    assert len(rows) == len(ncu_rate) > 0
    for row, rate, pct in zip(rows, ncu_rate, ncu_pct):
        assert row.bound == "memory" and row.roof == "DRAM", row.kernel
        assert row.achieved_dram_bytes_per_s == pytest.approx(rate, rel=1e-5)
        assert row.pct_of_roof == pytest.approx(pct, abs=0.5)


def test_elementwise_and_reduction_move_at_least_their_minimum_bytes():
    rows = roofline(read_launches(_csv("memory"))).launches
    for row, case in zip(rows, _cases("memory")):
        # written lines still in L2 when the kernel ends were never counted as DRAM writes
        assert case["min_dram_bytes"] - L2_BYTES <= row.dram_bytes < 1.05 * case["min_dram_bytes"], case["case"]
        assert row.arithmetic_intensity < 1  # far left of every ridge point


def _by_case(report: str):
    table = read_csv_file(_csv(report))
    rows = roofline(launches_from_csv(table)).launches
    case = {id(r): nvtx_ranges(raw)[-1] for r, raw in zip(rows, table.launches)}
    return {row.kernel: row for row in aggregate(rows, key=lambda r: case[id(r)])}


# Triton's softmax takes exp on the MUFU unit (ex2.approx), which ncu's FP counters do not count:
# 0.32 GFLOP against the manual version's 1.93 GFLOP for the same result.
FEWER_FLOPS = {"softmax_triton"}


@pytest.mark.parametrize("report", ["gelu", "softmax"])
def test_fusion_moves_fewer_bytes_at_higher_intensity(report):
    variants = _by_case(report)
    cases = {c["case"]: c for c in _cases(report)}
    assert set(variants) == set(cases)
    manual = variants[f"{report}_manual"]
    for name, row in variants.items():
        assert row.dram_bytes >= cases[name]["min_dram_bytes"] - L2_BYTES
        assert row.bound == "memory"
        if name != manual.kernel:
            assert row.launches == 1  # one fused kernel
            assert row.dram_bytes < manual.dram_bytes / 2
            assert row.duration_ns < manual.duration_ns / 2
            if name in FEWER_FLOPS:
                # its intensity is lower only because ncu counts fewer FLOPs, not because of bytes
                assert row.flops < manual.flops / 4
            else:
                assert row.arithmetic_intensity > manual.arithmetic_intensity
    assert manual.launches > 1
    # the fused library and compiled kernels come closer to the DRAM roof than the hand-written CUDA one
    assert variants[f"{report}_compiled"].pct_of_roof > variants[f"{report}_cuda"].pct_of_roof


def test_per_kernel_rows_sum_their_launches():
    result = roofline(read_launches(_csv("gelu")))
    durations = _ncu_metric("gelu", "gpu__time_duration.sum")
    assert sum(r.launches for r in result.kernels) == len(durations) == 12
    assert sum(r.duration_ns for r in result.kernels) == pytest.approx(sum(durations))
    mul = [r for r in result.kernels if "AUnaryFunctor" in r.kernel]
    assert [r.launches for r in mul] == [3]


def test_tensor_flops_from_the_hierarchical_chart_when_source_counters_are_missing():
    (launch,) = read_launches(_csv("gemm_bf16"))
    with_src = read_counters(launch.metrics, launch.duration_ns).tensor["bf16 tensor"].flops
    launch.metrics = {k: v for k, v in launch.metrics.items() if not k.startswith("sm__ops_path_tensor_src_")}
    from_ops = read_counters(launch.metrics, launch.duration_ns).tensor["bf16 tensor"].flops
    assert from_ops == with_src > 0


@pytest.mark.parametrize("report", ["gemm_fp32", "gemm_fp8", "memory"])
def test_details_page_agrees_with_raw_page(report):
    raw = roofline(read_launches(_csv(report))).launches
    details = roofline(read_launches(_csv(report, "details"))).launches
    for a, b in zip(raw, details):
        assert (a.roof, a.bound) == (b.roof, b.bound)
        assert b.achieved_flops_per_s == pytest.approx(a.achieved_flops_per_s, rel=0.01)  # 3 printed digits


@pytest.mark.parametrize("page", ["raw", "details"])
def test_old_csv_without_roofline_metrics_gives_the_hint(page):
    result = roofline(read_launches(_csv("old_way", page)))
    assert result.hint == CAPTURE_HINT and not result.has_metrics
    assert all(r.flops is None and r.roof is None and r.duration_ns for r in result.launches)
    assert all(r.dram_bytes for r in result.launches)  # what it has still shows


def test_cli_old_csv_prints_rows_and_one_hint_line():
    out = CliRunner().invoke(cli, ["roofline", str(_csv("old_way", "details")), "--format", "md"])
    assert out.exit_code == 0, out.output
    assert out.output.count("note: ") == 1 and "--ncu-top" in out.output


def test_cli_json_has_launch_and_kernel_rows():
    out = CliRunner().invoke(cli, ["roofline", str(_csv("gemm_fp8")), "--format", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert [r["roof"] for r in data["launches"]] == ["fp8 tensor"] and data["hint"] is None
    assert data["kernels"][0]["launches"] == 1


def test_cli_bad_input_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("not,an,ncu,csv\n")
    out = CliRunner().invoke(cli, ["roofline", str(bad)])
    assert out.exit_code == 2
    assert "Traceback" not in out.output and len(out.output.strip().splitlines()) == 1


def test_run_folder_prefers_raw_pages(tmp_path):
    import lzma

    (tmp_path / "ncu.csv").write_bytes(lzma.open(_csv("old_way", "details")).read())
    assert roofline(read_launches(tmp_path)).hint == CAPTURE_HINT
    (tmp_path / "ncu-1-raw.csv").write_bytes(lzma.open(_csv("gemm_bf16")).read())
    (tmp_path / "ncu-2-raw.csv").write_bytes(lzma.open(_csv("memory")).read())
    rows = roofline(read_launches(tmp_path)).launches
    assert [r.roof for r in rows] == ["bf16 tensor", "DRAM", "DRAM"] and [r.id for r in rows] == [0, 1, 2]


@pytest.mark.parametrize(("report", "page", "figure"), [("gelu", "raw", True), ("old_way", "details", False)])
def test_report_ncu_section_gets_the_roofline(report, page, figure):
    from profkit.report.model import Section
    from profkit.report.sections import fill_ncu

    section = Section("ncu", "Nsight Compute (ncu)")
    fill_ncu(section, _csv(report, page), 20, {})
    assert "roofline" in [t.key for t in section.tables]
    assert bool(section.figures) is figure
    assert any("--ncu-top" in n for n in section.notes) is not figure
    if figure:
        assert section.figures[0].png.startswith(b"\x89PNG") and section.figures[0].data["points"]


# -- the verdict joined with the kernel's machine code (issue 23) ---------------------------
def _nvcc_ptx_loads(cu: str, kernel: str, tmp_path) -> dict[int, int]:
    """Global loads per width of ``kernel`` in nvcc's own PTX for sm_90 (the oracle: no profkit
    code reads it)."""
    import subprocess

    from profkit.ptx.tools import find_tool
    from tests.test_kernel_code_report import ptx_widths

    out = tmp_path / "k.ptx"
    subprocess.run([str(find_tool("nvcc").path), "-ptx", "-arch=sm_90", "-o", str(out), cu], check=True)
    entries = out.read_text().split(".entry ")[1:]
    (body,) = [e for e in entries if e.split("(")[0].strip().startswith(f"_Z{len(kernel)}{kernel}")]
    return ptx_widths(body)[0]


def _have_nvcc() -> bool:
    from profkit.ptx.tools import find_tool

    return find_tool("nvcc", required=False) is not None


requires_nvcc = pytest.mark.skipif(not _have_nvcc(), reason="nvcc not found: the CUDA C++ samples need it")
SAMPLES = ROOF.parents[2] / "sample_kernels" / "csrc"


@pytest.fixture(scope="module")
def gelu_softmax_with_code():
    """`profkit roofline --kernels` on the lecture's GELU and softmax captures, compiled now for
    the capture's GPU (sm_90): JSON per report."""
    out = {}
    for report, targets in (("gelu", ["gelu_cuda", "gelu"]), ("softmax", ["softmax_cuda", "softmax"])):
        args = ["roofline", str(_csv(report)), "--format", "json"]
        for t in targets:
            args += ["--kernels", t]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        out[report] = json.loads(result.output)
    return out


@requires_nvcc
@pytest.mark.parametrize(("report", "cu"), [("gelu", "gelu.cu"), ("softmax", "softmax.cu")])
def test_memory_bound_cuda_kernel_with_scalar_loads_says_so(report, cu, gelu_softmax_with_code, tmp_path):
    kernel = f"{report}_kernel"
    loads = _nvcc_ptx_loads(str(SAMPLES / cu), kernel, tmp_path)
    assert loads and max(loads) <= 32  # nvcc's PTX: every global load of the hand-written kernel is scalar
    rows = gelu_softmax_with_code[report]["launches"]
    (cuda,) = [r for r in rows if r["kernel"].startswith(f"{kernel}(")]
    assert cuda["bound"] == "memory" and cuda["pct_of_roof"] < 80  # 58% and 54% of DRAM bandwidth
    assert "scalar global loads" in cuda["verdict"] and "a lead" in cuda["verdict"]
    assert f"({sum(loads.values())} of {sum(loads.values())}: 32-bit x{loads[32]})" in cuda["verdict"]
    assert cuda["code_source"] == "compiled" and cuda["vector_grade"].startswith("none")
    (per_name,) = [r for r in gelu_softmax_with_code[report]["kernels"] if r["kernel"] == cuda["kernel"]]
    assert "scalar global loads" in per_name["verdict"]


@requires_nvcc
@pytest.mark.parametrize("report", ["gelu", "softmax"])
def test_kernels_near_the_roof_or_without_code_get_no_lead(report, gelu_softmax_with_code):
    rows = gelu_softmax_with_code[report]["launches"]
    (triton,) = [r for r in rows if r["kernel"] == f"{report}_kernel"]  # the Triton sample: code known
    assert triton["code_source"] == "compiled" and triton["pct_of_roof"] >= 80
    assert "scalar" not in triton["verdict"] and "near the roof" in triton["verdict"]
    others = [r for r in rows if not r["kernel"].startswith(f"{report}_kernel")]
    assert others and all(r["code_source"] is None and "code" not in r["verdict"] for r in others)


def test_without_code_the_verdict_is_unchanged():
    out = CliRunner().invoke(cli, ["roofline", str(_csv("gelu")), "--format", "json"])
    rows = json.loads(out.output)["launches"]
    (cuda,) = [r for r in rows if r["kernel"].startswith("gelu_kernel(")]
    assert cuda["verdict"] == ("memory-bound at 58% of DRAM bandwidth: up to 1.7x from better access "
                               "(vectorized loads, fewer passes)")
    assert cuda["vector_grade"] is None


@requires_nvcc
def test_report_roofline_table_takes_the_code_of_the_kernel_table():
    # the report's kernel section joins code first (caches, --inductor, --kernels); the roofline reuses it
    from profkit.analysis.kernels.targets import KernelTargets
    from profkit.analysis.roofline.code import code_for_launches
    from profkit.report.model import Section
    from profkit.report.sections import fill_ncu

    launches = read_launches(_csv("gelu"))
    code, _ = code_for_launches(launches, targets=KernelTargets(("gelu_cuda",)).check())
    (cuda_launch,) = [x for x in launches if x.kernel_name.startswith("gelu_kernel(")]
    kernel_rows = [dict(code["gelu_kernel()"], name=cuda_launch.kernel_name, code_variants=1,
                        total_ns=cuda_launch.duration_ns)]
    section = Section("ncu", "Nsight Compute (ncu)")
    fill_ncu(section, _csv("gelu"), 20, {"kernels": kernel_rows})
    (table,) = [t for t in section.tables if t.key == "roofline"]
    (cuda,) = [r for r in table.rows if r["kernel"].startswith("gelu_kernel(")]
    assert "scalar global loads" in cuda["verdict"]


# -- the 2:4-sparse tensor peak of the details page (issue 23) ------------------------------
def _details_metric(report: str, name: str) -> float:
    (launch,) = read_launches(_csv(report, "details"))
    (value,) = [v.value for k, v in launch.metrics.items() if k.split("/")[-1] == name]
    return value


def test_details_page_bf16_peak_is_the_sparse_rate_and_the_verdict_says_so():
    # evidence: ncu's bf16 source peak equals fp8's dense (_sparsity_off) peak, which is twice
    # the dense bf16 rate on Hopper; so the details page reads the GEMM at half its raw-page roof
    bf16_peak = _details_metric("gemm_bf16", "sm__ops_path_tensor_src_bf16_dst_fp32.sum.peak_sustained")
    fp8_dense = _details_metric("gemm_bf16", "sm__ops_path_tensor_src_fp8_sparsity_off.sum.peak_sustained")
    fp8_sparse = _details_metric("gemm_bf16", "sm__ops_path_tensor_src_fp8_sparsity_on.sum.peak_sustained")
    assert bf16_peak == fp8_dense == fp8_sparse / 2
    (raw,) = roofline(read_launches(_csv("gemm_bf16"))).launches
    (details,) = roofline(read_launches(_csv("gemm_bf16", "details"))).launches
    (pipe_pct,) = _ncu_metric("gemm_bf16", "sm__pipe_tensor_cycles_active.sum.pct_of_peak_sustained_elapsed")
    assert details.pct_of_roof == pytest.approx(raw.pct_of_roof / 2, rel=0.02)
    assert 2 * details.pct_of_roof == pytest.approx(pipe_pct, abs=2.0)
    assert raw.sparse_peak_roofs == [] and "sparsity" not in raw.verdict
    assert details.sparse_peak_roofs == ["bf16 tensor"]
    assert "counts 2:4 sparsity" in details.verdict
    assert f"dense kernel is at {2 * details.pct_of_roof:.0f}%" in details.verdict
    assert "below the roof" not in details.verdict  # no headroom claimed against the sparse peak


@pytest.mark.parametrize("report", ["gemm_fp8", "gemm_fp32", "memory"])
def test_no_sparse_caveat_where_the_peak_is_dense(report):
    # fp8 has its own _sparsity_off peak on sm_90; fp32 and memory kernels use no tensor pipe
    for page in ("raw", "details"):
        rows = roofline(read_launches(_csv(report, page))).launches
        assert all(not r.sparse_peak_roofs and "sparsity" not in r.verdict for r in rows)


def test_no_sparse_caveat_before_ampere():
    (launch,) = read_launches(_csv("gemm_bf16", "details"))
    launch.cc = "7.5"  # Turing: no sparse tensor instructions, the source peak is the dense one
    (row,) = roofline([launch]).launches
    assert row.sparse_peak_roofs == [] and "sparsity" not in row.verdict


def test_report_notes_the_sparse_peak_of_a_details_page():
    from profkit.report.model import Section
    from profkit.report.sections import fill_ncu

    for page, noted in (("details", True), ("raw", False)):
        section = Section("ncu", "Nsight Compute (ncu)")
        fill_ncu(section, _csv("gemm_bf16", page), 20, {})
        assert any("2:4" in n for n in section.notes) is noted
