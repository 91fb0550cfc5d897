"""The ncu reader on files that are not (usable) ncu CSV: one-line errors, never tracebacks.

These inputs are hand-built on purpose (bad-input tests); real captures are
tested in test_ncu_reader.py.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from profkit.errors import ProfkitError
from profkit.readers.ncu import read_ncu_csv


def _write(tmp_path, name, content):
    p = tmp_path / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return p


@pytest.mark.parametrize("name, content, message", [
    ("empty.csv", "", "no ncu CSV table"),
    ("prose.csv", "hello\nworld\n", "no ncu CSV table"),
    ("nsys.csv", '"Time (%)","Total Time (ns)","Instances","Name"\n"50.0","100","1","k"\n', "no ncu CSV table"),
    ("nokernels.csv", "==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n",
     "profiled no kernels"),
    ("report.ncu-rep", b"NVIDIA Nsight Compute\x00\x01\x02", "is an ncu report, not CSV"),
])
def test_bad_files_raise_one_line_errors(tmp_path, name, content, message):
    path = _write(tmp_path, name, content)
    with pytest.raises(ProfkitError) as info:
        read_ncu_csv(path)
    assert message in info.value.one_line()
    assert "\n" not in info.value.one_line()


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ProfkitError, match="no such file"):
        read_ncu_csv(tmp_path / "absent.csv")
    with pytest.raises(ProfkitError, match="directory"):
        read_ncu_csv(tmp_path)


def test_cli_reports_bad_ncu_file_without_traceback(tmp_path):
    path = _write(tmp_path, "prose.csv", "not a csv at all\n")
    result = CliRunner().invoke(cli, ["occupancy", "--ncu", str(path)])
    assert result.exit_code == 2
    assert "profkit: error:" in result.output and "Traceback" not in result.output
