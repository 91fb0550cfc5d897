"""Short kernel names in terminal tables (like nsys's `:base`), full names in
JSON/CSV and with --wide; booleans as words."""

from __future__ import annotations

import json

from click.testing import CliRunner

from profkit.cli import cli
from profkit.output import format_value, kernel_base_name, short_kernel_names
from tests.conftest import nsys_fixture
from tests.test_summaries import read_oracle

FIXTURE = "nsys2025_train_print"


def _run(*args: str) -> str:
    result = CliRunner(env={"COLUMNS": "250"}).invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_base_names_like_nsys() -> None:
    assert kernel_base_name("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, "
                            "std::array<char *, (unsigned long)1>>(int, T2, T3)") == "vectorized_elementwise_kernel"
    assert kernel_base_name("void <unnamed>::softmax_warp_forward<float, float, float, (int)10, (bool)0, (bool)0>"
                            "(T2 *, const T1 *, int, int, int, const bool *, int, bool)") == "softmax_warp_forward"
    assert kernel_base_name("vector_add_kernel(const float *, const float *, float *, int)") == "vector_add_kernel"
    assert kernel_base_name("triton_poi_fused_add_mul_pow_tanh_0") == "triton_poi_fused_add_mul_pow_tanh_0"


def test_short_names_stay_distinct_on_a_real_kernel_table() -> None:
    names = [r["Name"] for r in read_oracle(FIXTURE, "cuda_gpu_kern_sum")]
    short = short_kernel_names(names)
    assert len(set(short)) == len(set(names))  # distinct kernels never share a label
    assert all(len(s) <= len(n) for s, n in zip(short, names))
    assert "Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nt_align1>" in short


def test_kernels_table_short_wide_and_json_full() -> None:
    path = str(nsys_fixture(FIXTURE))
    full = [r["Name"] for r in read_oracle(FIXTURE, "cuda_gpu_kern_sum")]
    longest = max(full, key=len)
    table = _run("kernels", path)
    assert "vectorized_elementwise_kernel<" in table and "std::array" not in table
    wide = _run("kernels", path, "--wide")
    assert "std::array" in wide
    rows = json.loads(_run("kernels", path, "--format", "json"))
    assert longest in {r["name"] for r in rows}
    assert longest[:60] in _run("kernels", path, "--format", "csv")


def test_booleans_read_as_words() -> None:
    assert format_value(True) == "yes" and format_value(False) == "no"
    table = _run("occupancy", str(nsys_fixture(FIXTURE)))
    assert " no " in table and "False" not in table and "True" not in table
