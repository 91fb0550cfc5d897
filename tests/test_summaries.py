"""Summaries equal `nsys stats` on every committed real export.

The oracle CSVs beside each fixture were written by `nsys stats --format csv
--timeunit nsec` (nsys 2025.3 for nsys2025_*, 2023.4 for nsys2023_*).
"""

from __future__ import annotations

import csv
import json
import random
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from profkit.analysis.kernels import summaries
from profkit.cli import cli
from profkit.readers import open_trace
from profkit.readers.nsys import open_export
from profkit.readers.nsys.model_source import trace_of_export
from profkit.analysis.kernels.grouped_stats import round_like_nsys, stats_from_columns
from profkit.model.trace import DECIMAL_HALF_UP, SQLITE_LEGACY
from tests.conftest import nsys_fixture, nsys_fixture_names, oracle_csv

FIXTURES = nsys_fixture_names()
NSYS_SQLITE3 = Path(__file__).parents[1] / ".tools/nsys/target-linux-x64/sqlite3"


# -- oracle CSVs ---------------------------------------------------------------
def read_oracle(export_name: str, report: str, folder: Path | None = None) -> list[dict[str, str]]:
    """Rows of an oracle CSV (beside the export in ``folder``, default tests/data/nsys);
    ``[]`` when nsys wrote no table (no such data)."""
    path = oracle_csv(export_name, report) if folder is None else oracle_csv(export_name, report, folder)
    if not path.exists():
        pytest.skip(f"no oracle {path.name}")
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    header_at = next((i for i, ln in enumerate(lines) if ln.startswith(("Time", "Total"))), None)
    if header_at is None:
        return []
    header = next(csv.reader([lines[header_at]]))
    rows = []
    for line in lines[header_at + 1 :]:
        # nsys quotes a name that holds commas but does not double the quotes
        # inside it, so csv cannot parse it; every column before the last
        # (the name) is a plain number or word.
        fields = line.split(",", len(header) - 1)
        last = fields[-1]
        if len(last) >= 2 and last[0] == '"' and last[-1] == '"':
            last = last[1:-1]
        rows.append(dict(zip(header, [*fields[:-1], last])))
    return rows


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _column(row: dict[str, str], *prefixes: str) -> str:
    for key, value in row.items():
        if key and any(key.startswith(p) for p in prefixes):
            return value
    raise KeyError(f"none of {prefixes} in {list(row)}")


def assert_rows_equal(mine: list[dict], oracle: list[dict[str, str]], key) -> None:  # noqa: ANN001
    """Same set of names, and every figure equal to nsys's, to 0.1 ns."""
    assert len(mine) == len(oracle), (len(mine), len(oracle))
    by_key = {key(r): r for r in mine}
    assert len(by_key) == len(mine), "duplicate names in profkit's rows"
    for want in oracle:
        k = key(want)
        assert k in by_key, f"{k!r} missing from profkit rows"
        got = by_key[k]
        assert got["total_ns"] == int(_num(_column(want, "Total Time"))), k
        assert got["instances"] == int(_num(_column(want, "Instances", "Num Calls", "Count"))), k
        assert got["avg_ns"] == _num(_column(want, "Avg")), k
        assert got["med_ns"] == _num(_column(want, "Med")), k
        assert got["min_ns"] == int(_num(_column(want, "Min"))), k
        assert got["max_ns"] == int(_num(_column(want, "Max"))), k
        assert got["stddev_ns"] == _num(_column(want, "StdDev")), k
        assert got["time_pct"] == _num(_column(want, "Time")), k
    totals = [r["total_ns"] for r in mine]
    assert totals == sorted(totals, reverse=True)


def test_fixtures_present() -> None:
    assert any(n.startswith("nsys2025_") for n in FIXTURES), "no nsys 2025.3 fixtures"
    assert any(n.startswith("nsys2023_") for n in FIXTURES), "no nsys 2023.4 fixtures"


@pytest.mark.parametrize("name", FIXTURES)
def test_kernel_summary_equals_cuda_gpu_kern_sum(name: str) -> None:
    oracle = read_oracle(name, "cuda_gpu_kern_sum")
    with open_trace(nsys_fixture(name)) as trace:
        rows = summaries.kernel_summary(trace)
    assert rows, "fixture has kernels"
    assert_rows_equal(rows, oracle, key=lambda r: r["name"] if "name" in r else r["Name"])
    assert list(rows[0]) == list(summaries.SUMMARY_KEYS)


@pytest.mark.parametrize("name", FIXTURES)
def test_api_summary_equals_cuda_api_sum(name: str) -> None:
    oracle = read_oracle(name, "cuda_api_sum")
    with open_trace(nsys_fixture(name)) as trace:
        rows = summaries.api_summary(trace)
    assert_rows_equal(rows, oracle, key=lambda r: r["name"] if "name" in r else r["Name"])


@pytest.mark.parametrize("name", FIXTURES)
def test_nvtx_summary_equals_nvtx_sum(name: str) -> None:
    oracle = read_oracle(name, "nvtx_sum")
    with open_export(nsys_fixture(name)) as export:
        if not oracle and not export.has_table("NVTX_EVENTS"):
            return
        rows = summaries.nvtx_summary(trace_of_export(export))
    assert_rows_equal(rows, oracle, key=lambda r: (r["name"], r["style"]) if "name" in r else (r["Range"], r["Style"]))


@pytest.mark.parametrize("name", FIXTURES)
def test_memory_summary_equals_mem_time_and_size_sums(name: str) -> None:
    time_oracle = read_oracle(name, "cuda_gpu_mem_time_sum")
    # The committed size oracles print MB with 3 decimals (0.000 for small
    # copies); these were made locally in bytes with nsys 2023.4:
    #   nsys stats -q --report cuda_gpu_mem_size_sum --format csv:mem=B -o OUT copy.sqlite
    size_oracle = read_oracle(name, "cuda_gpu_mem_size_sum_bytes")
    with open_trace(nsys_fixture(name)) as trace:
        rows = summaries.memory_summary(trace)
    assert rows, "every fixture copies memory"
    assert_rows_equal(rows, time_oracle, key=lambda r: r["name"] if "name" in r else r["Operation"])
    by_name = {r["name"]: r for r in rows}
    assert len(size_oracle) == len(rows)
    for want in size_oracle:
        got = by_name[want["Operation"]]
        assert got["instances"] == int(want["Count"])
        assert got["total_bytes"] == int(want["Total (B)"])
        assert got["min_bytes"] == int(want["Min (B)"]) and got["max_bytes"] == int(want["Max (B)"])
        assert got["med_bytes"] == float(want["Med (B)"])
        assert got["avg_bytes"] == float(want["Avg (B)"])
        # nsys's stdev runs Welford's update; profkit sums squared deviations:
        # the doubles agree to rounding error, not always to the last bit.
        assert got["stddev_bytes"] == pytest.approx(float(want["StdDev (B)"]), rel=1e-12, abs=1e-9)
        assert got["direction"] in want["Operation"]


# -- the statistics engine -------------------------------------------------
def _nsys_sqlite_stats(groups: dict[int, list[int]]) -> dict[int, tuple]:
    """The figures nsys's own SQLite build computes (median/stdev are its C functions)."""
    rows = ",".join(f"({k},{v})" for k, vs in groups.items() for v in vs)
    sql = (f"CREATE TABLE t(k, v); INSERT INTO t VALUES {rows};"
           "SELECT k, count(*), sum(v), round(avg(v),1), round(median(v),1), min(v), max(v),"
           " round(stdev(v),1) FROM t GROUP BY k;")
    out = subprocess.run([str(NSYS_SQLITE3), ":memory:"], input=sql, capture_output=True, text=True,
                         check=True).stdout
    result = {}
    for line in out.split():
        f = line.split("|")
        result[int(f[0])] = (int(f[1]), int(f[2]), float(f[3]), float(f[4]), int(f[5]), int(f[6]), float(f[7]))
    return result


def _random_groups(seed: int, n_groups: int) -> dict[int, list[int]]:
    rng = random.Random(seed)
    groups: dict[int, list[int]] = {}
    for key in range(n_groups):
        n = rng.choice([1, 2, 3, 4, 5, 8, 64])
        small = rng.random() < 0.5  # small values hit x.x5 rounding boundaries often
        groups[key] = [rng.randint(0, 20) if small else rng.randint(0, 10**10) for _ in range(n)]
    return groups


@pytest.mark.skipif(not NSYS_SQLITE3.exists(), reason="nsys 2023.4 kit not unpacked in .tools/")
# 3000 groups take the one-sort path, 300 the radix-group + np.partition path.
@pytest.mark.parametrize("seed, n_groups", [(1, 3000), (2, 300)])
def test_engine_equals_nsys_sqlite_functions(seed: int, n_groups: int) -> None:
    groups = _random_groups(seed, n_groups)
    expected = _nsys_sqlite_stats(groups)
    keys = np.array([k for k, vs in groups.items() for _ in vs], dtype=np.int64)
    values = np.array([v for vs in groups.values() for v in vs], dtype=np.int64)
    order = np.random.default_rng(seed).permutation(len(values))  # the engine must not rely on order
    got = {s.key[0]: (s.count, s.total, s.avg, s.med, s.min, s.max, s.stddev)
           for s in stats_from_columns([keys[order]], values[order])}
    assert got == expected


def test_engine_definitions_by_hand() -> None:
    # median of an even count is the mean of the middle two; stddev is the
    # sample one (n - 1); one value has stddev 0; avg 1.25 rounds to 1.3 as
    # SQLite rounds (Python's round gives 1.2).
    keys = [np.array([7, 7, 7, 7, 9, 3, 3], dtype=np.int64)]
    values = np.array([1, 2, 4, 10, 5, 1, 1], dtype=np.int64)
    by_key = {s.key[0]: s for s in stats_from_columns(keys, values)}
    a = by_key[7]
    assert (a.count, a.total, a.avg, a.med, a.min, a.max) == (4, 17, 4.3, 3.0, 1, 10)
    assert a.stddev == 4.0  # sqrt(((1-4.25)^2+(2-4.25)^2+(4-4.25)^2+(10-4.25)^2)/3) = 4.031
    assert by_key[9].stddev == 0.0 and by_key[9].med == 5.0
    assert by_key[3].avg == 1.0
    assert round_like_nsys([1.25, 0.35, -1.25], 1, SQLITE_LEGACY) == [1.3, 0.4, -1.3]
    keys = [np.array([1, 1, 1, 1], dtype=np.int64)]
    assert stats_from_columns(keys, np.array([1, 1, 1, 2], dtype=np.int64))[0].avg == 1.3


def test_rounding_modes_of_the_two_nsys_releases() -> None:
    # 261313 / 20 = 13065.65 in decimal, 13065.6499999999996 as a double:
    # nsys 2023.4 printed 13065.7, nsys 2025.3 13065.6 (same export, both oracles).
    assert round_like_nsys([261313 / 20], 1, SQLITE_LEGACY) == [13065.7]
    assert round_like_nsys([261313 / 20], 1, DECIMAL_HALF_UP) == [13065.6]
    # exact ties round away from zero in both
    assert round_like_nsys([70180.25, -0.25], 1, DECIMAL_HALF_UP) == [70180.3, -0.3]
    assert round_like_nsys([70180.25], 1, SQLITE_LEGACY) == [70180.3]


@pytest.mark.skipif(not NSYS_SQLITE3.exists(), reason="nsys 2023.4 kit not unpacked in .tools/")
def test_legacy_rounding_equals_nsys_2023_sqlite() -> None:
    rng = random.Random(3)
    values = [1.25, 0.35, 0.05, 13065.65, 2.675, 0.15, 0.45, 1e-5, 123456789012.35, 99.95]
    for _ in range(5000):
        n = rng.choice([1, 2, 3, 4, 8, 20, 40, 64, 1000])
        values.append(rng.randint(0, 10 ** rng.randint(1, 13)) / n)
        values.append(rng.randint(1, 10**9) * 100.0 / rng.randint(1, 10**12))
    sql = "\n".join(f"SELECT round({v!r}, 1);" for v in values)
    out = subprocess.run([str(NSYS_SQLITE3), ":memory:"], input=sql, capture_output=True, text=True,
                         check=True).stdout.split()
    assert [float(x) for x in out] == round_like_nsys(values, 1, SQLITE_LEGACY)


# -- top_n -------------------------------------------------------------------
def _row(name: str, total: int, n: int, lo: int, hi: int) -> dict:
    return {"name": name, "time_pct": 0.0, "total_ns": total, "instances": n, "avg_ns": total / n,
            "med_ns": 1.0, "min_ns": lo, "max_ns": hi, "stddev_ns": 1.0}


def test_top_n_sums_the_rest_into_one_row() -> None:
    rows = [_row("a", 500, 5, 10, 200), _row("b", 300, 3, 50, 150), _row("c", 150, 10, 1, 30),
            _row("d", 50, 2, 20, 30)]
    cut = summaries.top_n(rows, 2)
    assert [r["name"] for r in cut] == ["a", "b", "(other 2)"]
    other = cut[-1]
    assert other["total_ns"] == 200 and other["instances"] == 12
    assert other["min_ns"] == 1 and other["max_ns"] == 30
    assert other["avg_ns"] == round(200 / 12, 1)
    assert other["med_ns"] is None and other["stddev_ns"] is None
    assert other["time_pct"] == 20.0
    assert summaries.top_n(rows, 3) == rows  # "(other 1)" would hide a row for nothing
    assert summaries.top_n(rows, 10) == rows


# -- kernels per NVTX range = nvtx_kern_sum ------------------------------------------
# Oracles made locally with nsys 2023.4 (its nvtx_kern_sum reads both schemas):
#   nsys stats -q --report nvtx_kern_sum --format csv --timeunit nsec -o OUT copy.sqlite
# so they round the 2023.4 way, whatever nsys wrote the export.
_KERN_SUM_LINE = re.compile(
    r"^(?P<range>.*?),(?P<style>PushPop|StartEnd|),(?P<pid>\d*),(?P<tid>\d*),(?P<nvtx>\d+),(?P<kern>\d+),"
    r"(?P<total>\d+),(?P<avg>[\d.]+),(?P<med>[\d.]+),(?P<min>\d+),(?P<max>\d+),(?P<std>[\d.]+),(?P<name>.*)$"
)


def _unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


@pytest.mark.parametrize("name", FIXTURES)
def test_nvtx_kernel_summary_equals_nvtx_kern_sum(name: str) -> None:
    path = oracle_csv(name, "nvtx_kern_sum")
    if not path.exists():
        pytest.skip("no nvtx_kern_sum oracle")
    want = {}
    for line in path.read_text().splitlines()[1:]:
        m = _KERN_SUM_LINE.match(line)
        assert m, line
        key = (_unquote(m["range"]) or None, m["style"] or None, int(m["pid"]) if m["pid"] else None,
               int(m["tid"]) if m["tid"] else None, _unquote(m["name"]))
        want[key] = (int(m["nvtx"]), int(m["kern"]), int(m["total"]), float(m["avg"]), float(m["med"]),
                     int(m["min"]), int(m["max"]), float(m["std"]))
    with open_export(nsys_fixture(name)) as export:
        export.match_nsys_stats(2023)  # the oracle came from nsys 2023.4
        rows = summaries.nvtx_kernel_summary(trace_of_export(export))
    got = {(r["range"], r["style"], r["pid"], r["tid"], r["name"]):
           (r["nvtx_instances"], r["instances"], r["total_ns"], r["avg_ns"], r["med_ns"], r["min_ns"], r["max_ns"],
            r["stddev_ns"]) for r in rows}
    assert got == want
    assert [tuple(r) for r in rows] and list(rows[0]) == list(summaries.NVTX_KERNEL_KEYS)


def test_nvtx_range_gpu_time_sums_kernels_per_range() -> None:
    with open_trace(nsys_fixture("nsys2025_sync")) as trace:
        rows = summaries.nvtx_kernel_summary(trace)
        kernel_total = sum(r["total_ns"] for r in summaries.kernel_summary(trace))
    per_range = summaries.nvtx_range_gpu_time(rows, kernel_total)
    by_range = {r["range"]: r for r in per_range}
    # sync_elementwise.py launches its kernels inside "step" ranges, except one setup kernel.
    assert sum(r["total_ns"] for r in per_range) == kernel_total  # no nesting in this capture
    assert by_range["samples:step"]["instances"] == 56
    assert by_range["samples:step"]["time_pct"] > 90
    assert by_range[None]["instances"] == 1


# -- the CLI -------------------------------------------------------------------------
def _invoke(*args: str) -> str:
    # A wide terminal, so that rich tables print whole names.
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": "400"})
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.stderr == ""
    return result.stdout


def test_cli_kernels_json_rows_have_exactly_the_documented_keys() -> None:
    path = str(nsys_fixture("nsys2025_gelu"))
    rows = json.loads(_invoke("kernels", path, "--format", "json"))
    assert rows and all(list(r) == list(summaries.SUMMARY_KEYS) for r in rows)
    with open_trace(path) as trace:
        assert rows == summaries.kernel_summary(trace)
    oracle = read_oracle("nsys2025_gelu", "cuda_gpu_kern_sum")
    assert [r["name"] for r in rows] == [o["Name"] for o in oracle]  # same order as nsys too


def test_cli_formats_and_top() -> None:
    path = str(nsys_fixture("nsys2025_gelu"))
    rows = json.loads(_invoke("api", path, "--format", "json", "--top", "3"))
    assert len(rows) == 4 and rows[-1]["name"].startswith("(other ")
    full = json.loads(_invoke("api", path, "--format", "json"))
    assert sum(r["total_ns"] for r in rows) == sum(r["total_ns"] for r in full)
    assert rows[-1]["instances"] == sum(r["instances"] for r in full[3:])
    lines = _invoke("kernels", path, "--format", "csv").splitlines()
    assert lines[0] == "time_pct,total_ns,instances,avg_ns,med_ns,min_ns,max_ns,stddev_ns,name"
    assert len(lines) == 1 + len(full_kernels := json.loads(_invoke("kernels", path, "--format", "json")))
    md = _invoke("kernels", path, "--format", "md")
    assert md.count("\n| ") >= len(full_kernels) and "triton_poi_fused_add_mul_pow_tanh_0" in md
    table = _invoke("kernels", path)
    assert "triton_poi_fused" in table and "CUDA kernels" in table


def test_cli_nvtx_keeps_markup_as_text() -> None:
    path = str(nsys_fixture("nsys2025_nvtx"))
    rows = json.loads(_invoke("nvtx", path, "--format", "json"))
    names = {(r["name"], r["style"]) for r in rows}
    assert (":<script>alert(1)</script>", "PushPop") in names
    assert ("probe:inner", "PushPop") in names and (":cross-thread", "StartEnd") in names
    md = _invoke("nvtx", path, "--format", "md")
    assert "<script>" not in md and "&lt;script&gt;" in md
    assert "<script>alert(1)</script>" in _invoke("nvtx", path)  # terminal: verbatim text


def test_cli_info_json() -> None:
    info = json.loads(_invoke("info", str(nsys_fixture("nsys2023_vector_add")), "--format", "json"))
    assert info["nsys_version"].startswith("2023.4") and info["export_schema_version"].startswith("3.7")
    assert info["counts"]["kernels"] == 69
    assert "vector_add.py" in info["processes"][-1]["command_line"]


@pytest.mark.parametrize("command", ["kernels", "api", "nvtx", "info"])
def test_cli_help_has_examples(command: str) -> None:
    text = _invoke(command, "--help")
    assert "Examples:" in text and f"profkit {command} run.sqlite" in text and "--format" in text
