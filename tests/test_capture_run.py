"""Run-folder names, creation, run.json."""

from __future__ import annotations

import json
from datetime import datetime

from profkit.capture import run
from profkit.readers.run_folder import read_run_record

WHEN = datetime(2026, 11, 22, 14, 30, 5)


def test_run_name_from_scripts_and_modules():
    assert run.run_name("sample_kernels/gelu.py", WHEN) == "gelu-20261122-143005"
    assert run.run_name("my_pkg.bench", WHEN) == "bench-20261122-143005"
    assert run.run_name("./a b&c.py", WHEN) == "a_b_c-20261122-143005"
    assert run.run_name("/usr/local/bin/my-app", WHEN) == "my-app-20261122-143005"


def test_create_run_dir_never_reuses_a_folder(tmp_path):
    first = run.create_run_dir("gelu.py", runs_dir=tmp_path / "runs", when=WHEN)
    second = run.create_run_dir("gelu.py", runs_dir=tmp_path / "runs", when=WHEN)
    assert first.name == "gelu-20261122-143005"
    assert second.name == "gelu-20261122-143005-2"
    assert first.is_dir() and second.is_dir()


def test_create_run_dir_with_an_explicit_output(tmp_path):
    out = run.create_run_dir("gelu.py", output=tmp_path / "mine" / "run1")
    assert out == (tmp_path / "mine" / "run1").resolve() and out.is_dir()
    assert run.create_run_dir("gelu.py", output=out) == out  # an existing folder is fine


def test_run_record_round_trip(tmp_path):
    record = run.RunRecord(command=["gelu.py", "--n", "4096"], cwd="/work", run_dir=str(tmp_path))
    record.exit_code, record.partial, record.partial_reason = 3, True, "the program exited with status 3"
    record.tools["nsys"] = {"path": "/opt/nsys", "source": "path", "version": "2025.3.1.90"}
    with run.Stopwatch(record)("nsys"):
        pass
    record.finish("partial")
    path = record.write(tmp_path)
    data = json.loads(path.read_text())
    assert data == read_run_record(tmp_path)
    assert data["command"] == ["gelu.py", "--n", "4096"]
    assert data["status"] == "partial" and data["partial"] is True and data["exit_code"] == 3
    assert data["tools"]["nsys"]["version"] == "2025.3.1.90"
    assert data["seconds"]["nsys"] >= 0
    assert data["finished"] is not None
    assert not list(tmp_path.glob("*.tmp"))
    info = record.report_info()
    assert info["partial"] is True and info["exit_code"] == 3 and info["command"] == record.command


def test_short_kernel_names_for_the_terminal():
    from profkit.capture.summary import short_kernel_name

    assert short_kernel_name("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<int>, "
                             "std::array<char *, (unsigned long)1>>(int, T2, T3)") == \
        "vectorized_elementwise_kernel<4, FillFunctor<int>>"
    assert short_kernel_name("gelu_kernel(const float *, float *, int)") == "gelu_kernel(const float *, float *, int)"
    assert short_kernel_name("triton_poi_fused_add_mul_pow_tanh_0") == "triton_poi_fused_add_mul_pow_tanh_0"
    long = short_kernel_name("void f<" + "x" * 200 + ">(int)", width=40)
    assert len(long) == 40 and long.endswith("…")
