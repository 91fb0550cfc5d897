"""scripts/samples_table.py on the real GELU and softmax traces.

Expected numbers come from the nvtx_kern_sum oracle (`nsys stats`) CSVs and
the command line recorded in the export (--n 4096 --trials 5), not from
profkit's own summaries.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import NSYS_DATA, nsys_fixture, oracle_csv

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "samples_table.py"
spec = importlib.util.spec_from_file_location("samples_table", SCRIPT)
samples_table = importlib.util.module_from_spec(spec)
sys.modules["samples_table"] = samples_table  # dataclasses look their module up there
spec.loader.exec_module(samples_table)

H200_PEAK_GBPS = 4814.304  # TARGET_INFO_GPU.memoryBandwidth of the fixtures' H200


def oracle_range_totals(name: str) -> dict[str, tuple[int, int]]:
    """range -> (kernel instances, total kernel ns) from nvtx_kern_sum."""
    totals: dict[str, tuple[int, int]] = {}
    with open(oracle_csv(name, "nvtx_kern_sum")) as fh:
        for row in csv.DictReader(fh):
            count, total = totals.get(row["NVTX Range"], (0, 0))
            totals[row["NVTX Range"]] = (count + int(row["Kern Inst"]), total + int(row["Total Time (ns)"]))
    return totals


def test_gelu_table_from_the_real_trace():
    table = samples_table.measure(nsys_fixture("nsys2025_gelu"))
    assert table.sample == "gelu" and table.gpu == "NVIDIA H200"
    assert table.size == "4096 x 4096 fp32" and table.calls_from == "--trials"
    oracle = oracle_range_totals("nsys2025_gelu")
    rows = {v.variant: v for v in table.variants}
    assert list(rows) == ["manual", "pytorch", "cuda", "triton", "compiled"]
    bytes_per_call = 4096 * 4096 * 4 * 2
    for variant, row in rows.items():
        launches, total = oracle[f"samples:gelu/{variant}"]
        assert row.calls == 5
        assert row.gpu_ns_per_call == pytest.approx(total / 5, abs=1e-9)
        assert row.kernels_per_call == launches / 5
        assert row.achieved_gbps == pytest.approx(bytes_per_call / (total / 5))
        assert row.pct_of_peak == pytest.approx(100 * bytes_per_call / (total / 5) / H200_PEAK_GBPS, rel=1e-4)
        assert row.wall_ns_per_call is None  # this trace predates the per-call ranges
    assert rows["manual"].kernels_per_call == 8  # pow, 3 mul, 2 add, tanh, mul: every op its own kernel
    assert rows["pytorch"].speedup_vs_manual == pytest.approx(oracle["samples:gelu/manual"][1]
                                                              / oracle["samples:gelu/pytorch"][1])
    assert rows["cuda"].kernels == ["gelu_kernel(const float *, float *, int)"]
    assert rows["triton"].kernels == ["gelu_kernel"]


def test_findings_say_where_the_lecture_holds_and_where_not():
    gelu = samples_table.findings(samples_table.measure(nsys_fixture("nsys2025_gelu")))
    assert gelu[0].endswith("triton = pytorch = compiled < cuda < manual.")
    assert gelu[1] == "Every ordering the lecture states (ties within 10 % aside) holds here."
    assert "lecture 7.4x, measured 9.0x (GPU time): agrees within a factor of 2" in gelu[2]
    softmax = samples_table.findings(samples_table.measure(nsys_fixture("nsys2025_softmax")))
    assert softmax[1].startswith("Disagreements: the lecture has pytorch (1.5 ms) faster than triton (1.9 ms)")
    # 4096 x 1024 fp32 in + out is 32 MiB: fits the H200's L2, and the report says so
    assert any("fit in the L2 cache" in line for line in softmax)


def test_run_folder_with_compressed_export_and_run_json(tmp_path):
    run = tmp_path / "gelu"
    run.mkdir()
    shutil.copy(NSYS_DATA / "nsys2025_gelu.sqlite.xz", run / "trace.sqlite.xz")
    (run / "run.json").write_text(json.dumps({"command": ["sample_kernels/gelu.py", "--n", "4096", "--trials",
                                                          "5"]}))
    table = samples_table.measure(run)
    assert table.command == "sample_kernels/gelu.py --n 4096 --trials 5"
    assert [v.calls for v in table.variants] == [5] * 5
    out = tmp_path / "README.md"
    assert samples_table.main([str(run), str(nsys_fixture("nsys2025_softmax")), "-o", str(out)]) == 0
    text = out.read_text()
    assert "## GELU" in text and "## Softmax" in text
    assert "| PyTorch fused | 1.1 | 0.03292 |" in text


def test_a_trace_without_sample_ranges_is_an_error(capsys):
    assert samples_table.main([str(nsys_fixture("nsys2025_bad"))]) == 2
    assert "no samples:gelu/..." in capsys.readouterr().err
