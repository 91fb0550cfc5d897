"""Choosing kernels for ncu, its command line, merging its CSV pages, reading its errors."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from profkit.capture import ncu
from profkit.errors import ProfkitError
from profkit.readers.nsys import open_export, queries
from tests.conftest import ncu_fixture, nsys_fixture


def gelu_rows():
    from profkit.capture.trace import kernel_rows

    rows, total = kernel_rows(nsys_fixture("nsys2025_gelu"))
    return rows, total


def test_mangled_names_from_a_real_export():
    with open_export(nsys_fixture("nsys2025_gelu")) as export:
        names = queries.mangled_names(export)
    assert names["gelu_kernel(const float *, float *, int)"] == "_Z11gelu_kernelPKfPfi"
    assert names["gelu_kernel"] == "gelu_kernel"  # Triton kernels are not mangled
    assert names["triton_poi_fused_add_mul_pow_tanh_0"] == "triton_poi_fused_add_mul_pow_tanh_0"


def test_pick_targets_takes_the_busiest_kernels_with_mangled_names():
    rows, total = gelu_rows()
    targets = ncu.pick_targets(rows, 3)
    assert [t.rank for t in targets] == [1, 2, 3]
    # the busiest kernels of nsys2025_gelu__cuda_gpu_kern_sum.csv
    assert targets[0].name == "triton_poi_fused_add_mul_pow_tanh_0"
    assert targets[0].total_ns == 8165809 and targets[0].instances == 220
    assert targets[1].match == "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIiEESt5arrayIPcLm1EEEEviT0_T1_"
    assert all(t.name_base == "mangled" for t in targets)
    assert total == sum(r["total_ns"] for r in rows)


def test_pick_targets_without_mangled_names_matches_demangled():
    targets = ncu.pick_targets([{"name": "b(int)", "total_ns": 5, "instances": 1},
                                {"name": "a(int)", "total_ns": 9, "instances": 2}], 5)
    assert [(t.rank, t.name, t.match, t.name_base) for t in targets] == [
        (1, "a(int)", "a(int)", "demangled"), (2, "b(int)", "b(int)", "demangled")]


def test_ncu_command_line(tmp_path):
    target = ncu.KernelTarget(1, "gelu_kernel(const float *, float *, int)", "_Z11gelu_kernelPKfPfi", "mangled",
                              561442, 8)
    cmd = ncu.build_ncu_command("/usr/local/cuda/bin/ncu", target, tmp_path / "ncu-1",
                                ["python3", "gelu.py", "--n", "4096"])
    assert cmd[0] == "/usr/local/cuda/bin/ncu"
    assert cmd[-4:] == ["python3", "gelu.py", "--n", "4096"]
    sections = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--section"]
    assert sections == ["SpeedOfLight", "Occupancy", "LaunchStats", "SpeedOfLight_RooflineChart",
                        "SpeedOfLight_HierarchicalTensorRooflineChart"]
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    assert {"dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum"} <= set(metrics)
    # what the roofline reads: FMA counts and peaks, DRAM bytes and peak
    assert {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "dram__bytes.sum.peak_sustained",
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"} <= set(metrics)
    assert cmd[cmd.index("--kernel-name-base") + 1] == "mangled"
    assert cmd[cmd.index("--kernel-name") + 1] == "_Z11gelu_kernelPKfPfi"
    assert cmd[cmd.index("--launch-count") + 1] == "1"
    assert cmd[cmd.index("--export") + 1] == str(tmp_path / "ncu-1")
    assert ncu.report_path(tmp_path, target) == tmp_path / "ncu-1.ncu-rep"


def test_ncu_command_line_without_roofline_is_the_old_one(tmp_path):
    target = ncu.KernelTarget(1, "k", "k", "demangled", 1, 1)
    cmd = ncu.build_ncu_command("ncu", target, tmp_path / "ncu-1", ["a.out"], roofline=False)
    assert [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--section"] == ["SpeedOfLight", "Occupancy",
                                                                                 "LaunchStats"]
    assert cmd[cmd.index("--metrics") + 1] == "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum"


def test_roofline_refusal_is_told_apart_from_other_failures():
    assert ncu.refused_roofline('==ERROR== Failed to find metric sm__sass_thread_inst_executed_op_hfma_pred_on.sum')
    assert ncu.refused_roofline("==ERROR== Could not find section 'SpeedOfLight_HierarchicalTensorRooflineChart'")
    assert not ncu.refused_roofline("==ERROR== ERR_NVGPUCTRPERM - no permission")


def test_import_command():
    assert ncu.build_import_command("ncu", Path("r.ncu-rep")) == ["ncu", "--import", "r.ncu-rep", "--csv",
                                                                 "--page", "details"]


def details_fixture() -> str:
    try:
        return ncu_fixture("probe_details_import.csv").read_text()
    except FileNotFoundError:
        pytest.skip("ncu fixtures not unpacked")


def test_merge_renumbers_launch_ids():
    text = details_fixture()
    rows = list(csv.reader(io.StringIO(text)))
    ids = sorted({int(r[0]) for r in rows[1:] if r and r[0].isdigit()})
    merged = list(csv.reader(io.StringIO(ncu.merge_details_csv([text, text]))))
    assert merged[0] == rows[0]
    assert len(merged) == 2 * (len(rows) - 1) + 1
    merged_ids = sorted({int(r[0]) for r in merged[1:]})
    assert merged_ids == ids + [i + max(ids) + 1 for i in ids]
    # everything but the ID column is unchanged
    assert [r[1:] for r in merged[1:len(rows)]] == [r[1:] for r in rows[1:]]


def test_merge_skips_tool_lines_before_the_header():
    text = details_fixture()
    noisy = "==PROF== Connected to process 1\nhello from the program\n" + text
    assert ncu.merge_details_csv([noisy]) == ncu.merge_details_csv([text])


def test_merge_refuses_different_columns():
    with pytest.raises(ProfkitError, match="different columns"):
        ncu.merge_details_csv(['"ID","Kernel Name"\n"0","a"\n', '"ID","Other"\n"0","b"\n'])


@pytest.mark.parametrize("output, expected", [
    ("==PROF== Connected to process 4242\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to "
     "access NVIDIA GPU Performance Counters on the target device 0.\n",
     "no permission to read GPU performance counters"),
    ("==PROF== Connected to process 1\n==ERROR== The application returned an error code (1).\n",
     "The application returned an error code (1)."),
    ("==PROF== Disconnected from process 1\n==WARNING== No kernels were profiled.\n", "No kernels were profiled."),
    ("", "no output"),
])
def test_first_error(output, expected):
    assert ncu.first_error(output).startswith(expected)
