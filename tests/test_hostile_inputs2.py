"""Issue 34, part B: hostile history databases and ncu CSVs, strict JSON, plain text in figures,
a bounded bootstrap, SIGTERM, and roofline counters given as rates.

Every crafted input is built here from a committed real capture (a history made by
``profkit history add`` from tests/data/kineto/hist_run*.json.gz; the ncu CSVs of
tests/data/ncu and tests/data/roofline) with a few rows, cells or columns changed;
nothing crafted is committed.  The full-size recipes are timed by
benchmarks/hostile_inputs2.py.
"""

from __future__ import annotations

import csv
import io
import json
import lzma
import math
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profkit.errors import ProfkitError
from tests.conftest import DATA, ncu_fixture
from tests.hostile import run

ROOT = Path(__file__).resolve().parent.parent
SECONDS = 30  # the README's promise for a crafted input, on a loaded 2-core machine
HIST_RUNS = [DATA / "kineto" / f"hist_run{i}.json.gz" for i in (1, 2)]
ROOFLINE = DATA / "roofline"
NCU_RAW = "matmul_raw_import.csv"
NCU_DETAILS = "matmul_details_import.csv"
ENDLESS = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r"


def one_line_error(code: int, stderr: str, *words: str) -> None:
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("profkit: error: "), (code, stderr[-800:])
    for word in words:
        assert word in lines[0], lines[0]


def _reject(name: str) -> Any:
    raise AssertionError(f"{name} is not JSON")


def strict_json(text: str) -> Any:
    """Parse as strict JSON: NaN, Infinity and -Infinity fail the test."""
    return json.loads(text, parse_constant=_reject)


# -- the history database ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A history written by `profkit history add` from two real runs."""
    db = tmp_path_factory.mktemp("history") / "real.db"
    for i, trace in enumerate(HIST_RUNS, start=1):
        code, _, err, _ = run(["history", "add", str(trace), "--db", str(db), "--label", f"run{i}"])
        assert code == 0, err
    return db


def crafted_history(real: Path, tmp_path: Path, *statements: str, params: tuple = ()) -> Path:
    """A copy of the real history with ``statements`` run on it."""
    db = tmp_path / "crafted.db"
    shutil.copyfile(real, db)
    conn = sqlite3.connect(db)
    with conn:
        for sql in statements:
            conn.execute(sql, params if "?" in sql else ())
    conn.close()
    return db


def test_a_real_history_is_marked_as_profkit_s(real_history: Path) -> None:
    from profkit.history import APPLICATION_ID

    with sqlite3.connect(real_history) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


def test_an_endless_kernels_view_is_refused_at_once(real_history: Path, tmp_path: Path) -> None:
    db = crafted_history(real_history, tmp_path, "ALTER TABLE kernels RENAME TO kernels_real",
                         f"CREATE VIEW kernels AS SELECT n AS run_id, 'k' AS name, NULL AS key, 1.0 AS ns_per_step, "
                         f"NULL AS samples FROM ({ENDLESS})")
    code, _, err, elapsed = run(["history", "show", "--db", str(db), "--metric", "kernel:k",
                                 "--plot", str(tmp_path / "p.png")])
    one_line_error(code, err, "not a profkit history database", "view 'kernels'")
    assert elapsed < 5
    assert not (tmp_path / "p.png").exists()


def test_a_trigger_on_runs_is_refused_and_the_file_unchanged(real_history: Path, tmp_path: Path) -> None:
    db = crafted_history(real_history, tmp_path, "CREATE TRIGGER endless BEFORE INSERT ON runs BEGIN "
                                                 f"SELECT count(*) FROM ({ENDLESS}); END")
    before = db.read_bytes()
    code, _, err, elapsed = run(["history", "add", str(HIST_RUNS[0]), "--db", str(db)])
    one_line_error(code, err, "trigger 'endless'")
    assert elapsed < SECONDS and db.read_bytes() == before


def test_the_guard_denies_a_view_and_a_trigger_even_unchecked(tmp_path: Path) -> None:
    """The authorizer of profkit.readers.sqlite_input, under the refusal: a view is never read and
    a trigger never fires, whatever their names (and profkit's own CTEs still run)."""
    from profkit.readers.sqlite_input import connect

    path = tmp_path / "code.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, label TEXT)")
        conn.execute(f"CREATE VIEW Kernels AS {ENDLESS}")
        conn.execute(f"CREATE TRIGGER t AFTER INSERT ON runs BEGIN SELECT count(*) FROM ({ENDLESS}); END")
    conn = connect(path, read_only=False)
    start = time.perf_counter()
    with pytest.raises(sqlite3.DatabaseError, match="not authorized|prohibited"):
        conn.execute("SELECT * FROM kernels LIMIT 1").fetchall()
    with pytest.raises(sqlite3.DatabaseError, match="not authorized|prohibited"):
        conn.execute("INSERT INTO runs (label) VALUES ('x')")
    assert conn.execute("WITH s AS (SELECT 2 AS n) SELECT n FROM s").fetchall() == [(2,)]
    assert time.perf_counter() - start < 2


def test_sigterm_stops_a_history_query(tmp_path: Path) -> None:
    """A query of a history ends within 2 s of SIGTERM with exit 143, no traceback (Python's
    handlers wait while SQLite runs; the guard's progress handler reads the stop)."""
    path = tmp_path / "h.db"
    sqlite3.connect(path).close()
    script = ("import profkit.signals as s; s.install()\n"
              "from pathlib import Path\nfrom profkit.history import _db\n"
              f"db = _db(Path({str(path)!r}))\nprint('ready', flush=True)\n"
              f"db.query('SELECT count(*) FROM ({ENDLESS})')\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    start = time.perf_counter()
    _, err = proc.communicate(timeout=20)
    assert time.perf_counter() - start < 2
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err


@pytest.mark.parametrize("what, path_text", [
    ("an nsys export", None),
    ("a text file", "not a database\n"),
])
def test_a_file_profkit_did_not_write_is_refused(what: str, path_text: str | None, tmp_path: Path) -> None:
    from tests.conftest import nsys_fixture

    if path_text is None:
        db = tmp_path / "export.sqlite"
        shutil.copyfile(nsys_fixture("nsys2025_sync_apis"), db)
    else:
        db = tmp_path / "text.db"
        db.write_text(path_text)
    before = db.read_bytes()
    for args in (["history", "show", "--db", str(db), "--plot", str(tmp_path / "p.png")],
                 ["history", "add", str(HIST_RUNS[0]), "--db", str(db)]):
        code, _, err, _ = run(args)
        one_line_error(code, err)
        assert "history database" in err or "not an SQLite database" in err
    assert db.read_bytes() == before


def test_another_application_id_is_refused(real_history: Path, tmp_path: Path) -> None:
    db = crafted_history(real_history, tmp_path, "PRAGMA application_id = 1234")
    code, _, err, _ = run(["history", "show", "--db", str(db), "--plot", str(tmp_path / "p.png")])
    one_line_error(code, err, "application_id 1234")


SAMPLES = {
    "deep nesting": "[" * 100_000 + "]" * 100_000,
    "a string": '"fast"',
    "broken JSON": "[1.0, 2.0",
    "an object": '{"a": 1}',
    "a NaN": "[1.0, NaN, 2.0]",
    "an overflow": "[1e400, 1.0, 2.0]",
    "5M values": "[" + ", ".join(["1.0"] * 5_000_000) + "]",
}


@pytest.mark.parametrize("case", sorted(SAMPLES))
def test_crafted_gpu_samples_are_one_line(case: str, real_history: Path, tmp_path: Path) -> None:
    db = crafted_history(real_history, tmp_path, "UPDATE runs SET gpu_samples = ? WHERE id = 2",
                         params=(SAMPLES[case],))
    code, _, err, elapsed = run(["history", "show", "--db", str(db), "--plot", str(tmp_path / "p.png")])
    one_line_error(code, err, "gpu_samples")
    assert elapsed < SECONDS


@pytest.mark.parametrize("column, value", [("gpu_samples", b"[1.0]"), ("gpu_samples", 5), ("label", b"\x00run"),
                                           ("id", "one")])
def test_a_value_of_the_wrong_type_is_one_line(column: str, value: Any, real_history: Path, tmp_path: Path) -> None:
    if column == "id":  # a rowid alias holds integers only: a text id needs a table without one
        db = crafted_history(real_history, tmp_path, "CREATE TABLE r2 AS SELECT * FROM runs", "DROP TABLE runs",
                             "ALTER TABLE r2 RENAME TO runs", "UPDATE runs SET id = ? WHERE id = 2",
                             params=(value,))
    else:
        db = crafted_history(real_history, tmp_path, f"UPDATE runs SET {column} = ? WHERE id = 2", params=(value,))
    code, _, err, _ = run(["history", "show", "--db", str(db), "--plot", str(tmp_path / "p.png")])
    one_line_error(code, err, f"runs.{column}" if column != "gpu_samples" else "gpu_samples")


def test_samples_past_the_limit_name_the_variable(real_history: Path, tmp_path: Path) -> None:
    code, _, err, _ = run(["history", "show", "--db", str(real_history), "--plot", str(tmp_path / "p.png")],
                          env={"PROFKIT_MAX_SAMPLES": "5"})
    one_line_error(code, err, "PROFKIT_MAX_SAMPLES")


def test_a_numeric_commit_in_run_json_is_text(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copyfile(HIST_RUNS[0], folder / "trace.json.gz")
    (folder / "run.json").write_text(json.dumps({"commit": 1234567}))
    db = tmp_path / "h.db"
    code, out, err, _ = run(["history", "add", str(folder), "--db", str(db)])
    assert code == 0, err
    with sqlite3.connect(db) as conn:
        assert conn.execute('SELECT "commit", label FROM runs').fetchone() == ("1234567", "1234567")
    (folder / "run.json").write_text(json.dumps({"commit": {"sha": "x"}}))
    code, _, err, _ = run(["history", "add", str(folder), "--db", str(db)])
    one_line_error(code, err, "commit")


MATH = r"$\frac{a}$"


def test_dollar_labels_and_commits_are_plain_text_in_the_plot(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    for i, trace in enumerate(HIST_RUNS):
        code, _, err, _ = run(["history", "add", str(trace), "--db", str(db), "--label", f"{MATH}{i}",
                               "--commit", MATH])
        assert code == 0, err
    code, out, err, _ = run(["history", "show", "--db", str(db), "--format", "json",
                             "--plot", str(tmp_path / "p.png")])
    assert code == 0, err
    assert [r["label"] for r in strict_json(out)["runs"]] == [f"{MATH}0", f"{MATH}1"]
    assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")


# -- ncu CSVs: bounded, and numbers that are no finite double are unknown --------------------------
def _rows(name: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(ncu_fixture(name).read_text())))


def _write(rows: list[list[str]], dest: Path) -> Path:
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    dest.write_text(buf.getvalue())
    return dest


def wide_raw_csv(tmp_path: Path, columns: int, rows: int) -> Path:
    """The real raw page's header with ``columns`` more metric columns, then ``rows`` short rows
    (each a real launch's first cells): the 1 MB CSV that took 31 s and 3.75 GB."""
    real = _rows(NCU_RAW)
    header = real[0] + [f"x__m{i}" for i in range(columns)]
    launch = real[2][:5]
    body = [[str(i), *launch[1:]] for i in range(rows)]
    return _write([header, *body], tmp_path / "hostile_wide_raw.csv")


def test_a_csv_with_100k_columns_is_refused_fast(tmp_path: Path) -> None:
    path = wide_raw_csv(tmp_path, 100_000, 200)
    code, _, err, elapsed = run(["occupancy", "--ncu", str(path)])
    one_line_error(code, err, "PROFKIT_MAX_CSV_COLUMNS")
    assert elapsed < 10
    code, _, err, _ = run(["occupancy", "--ncu", str(path)], env={"PROFKIT_MAX_CSV_COLUMNS": "200000"})
    one_line_error(code, err, "PROFKIT_MAX_CSV_CELLS")


def wide_details_csv(tmp_path: Path, columns: int) -> Path:
    """The real details page with ``columns`` more header columns and 50 empty cells more per row."""
    real = _rows(NCU_DETAILS)
    start = next(i for i, r in enumerate(real) if r[:1] == ["ID"])
    header = real[start] + [f"pad{i}" for i in range(columns)]
    body = [r + [""] * 50 for r in real[start + 1:]]
    return _write([header, *body], tmp_path / "hostile_wide_details.csv")


def test_a_details_csv_with_wide_rows_reads_only_its_columns(tmp_path: Path) -> None:
    """A real details page whose header gets 15,000 more columns: the rows are read by the
    columns a details page has, not padded to the header (a 1.9 MB one ended in MemoryError)."""
    path = wide_details_csv(tmp_path, 15_000)
    code, out, err, elapsed = run(["occupancy", "--ncu", str(path), "--format", "json"])
    base = run(["occupancy", "--ncu", str(ncu_fixture(NCU_DETAILS)), "--format", "json"])
    assert code == 0 and elapsed < SECONDS, err
    assert strict_json(out) == strict_json(base[1])


def test_rows_and_cells_past_their_limits(tmp_path: Path) -> None:
    path = ncu_fixture(NCU_DETAILS)
    code, _, err, _ = run(["occupancy", "--ncu", str(path)], env={"PROFKIT_MAX_CSV_ROWS": "100"})
    one_line_error(code, err, "PROFKIT_MAX_CSV_ROWS")
    real = _rows(NCU_RAW)
    real[2][4] = "k" * 300_000  # the kernel name cell
    code, _, err, _ = run(["occupancy", "--ncu", str(_write(real, tmp_path / "hostile_long_cell.csv"))])
    one_line_error(code, err, "PROFKIT_MAX_STRING")


def test_an_xz_csv_that_expands_past_the_ratio_is_refused(tmp_path: Path) -> None:
    text = ncu_fixture(NCU_RAW).read_text()
    path = tmp_path / "hostile_bomb.csv.xz"
    path.write_bytes(lzma.compress((text + "\n" * (200 << 20)).encode(), preset=1))
    code, _, err, elapsed = run(["occupancy", "--ncu", str(path)])
    one_line_error(code, err, "PROFKIT_MAX_GZIP_RATIO")
    assert elapsed < SECONDS


HOSTILE_NUMBERS = ["1e400", "1e" + "5" * 5000, "1e308", "-1e400", "inf", "NaN", "9" * 5000, "²"]


def roofline_csv(tmp_path: Path, cell: str, metric: str = "dram__bytes.sum", kernel: str | None = None) -> Path:
    """The real fp32 GEMM raw page with one cell replaced (and the kernel renamed)."""
    rows = list(csv.reader(io.StringIO(lzma.open(ROOFLINE / "gemm_fp32_raw.csv.xz", "rt").read())))
    # DRAM bytes have three sources: the sum, read + write, and the rate per second x duration
    dram = ("dram__bytes_read.sum", "dram__bytes_write.sum", "dram__bytes.sum.per_second")
    for name in (metric, *(dram if metric == "dram__bytes.sum" else ())):
        rows[2][rows[0].index(name)] = cell
        rows[1][rows[0].index(name)] = "byte/s" if name.endswith("per_second") else "Gbyte"
    if kernel is not None:
        rows[2][rows[0].index("Kernel Name")] = kernel
    return _write(rows, tmp_path / "hostile_cell_raw.csv")


@pytest.mark.parametrize("cell", HOSTILE_NUMBERS, ids=lambda c: c[:12])
def test_a_number_past_a_double_is_unknown(cell: str, tmp_path: Path) -> None:
    path = roofline_csv(tmp_path, cell)
    code, out, err, elapsed = run(["roofline", str(path), "--format", "json"])
    assert code == 0 and elapsed < SECONDS, err
    launch = strict_json(out)["launches"][0]
    assert launch["dram_bytes"] is None
    for args in (["occupancy", "--ncu", str(path), "--format", "json"],):
        code, out, err, _ = run(args)
        assert code == 0, err
        strict_json(out)


@pytest.mark.parametrize("cell", ["1" + "0" * 20, "9" * 30, "²", "1" * 5000])
def test_an_id_that_is_no_small_integer_is_not_a_launch(cell: str, tmp_path: Path) -> None:
    real = _rows(NCU_RAW)
    real[2][0] = cell
    code, out, err, _ = run(["occupancy", "--ncu", str(_write(real, tmp_path / "hostile_id.csv")),
                             "--format", "json"])
    assert code in (0, 2), err
    assert "Traceback" not in err


def test_a_dollar_kernel_name_is_drawn_as_text(tmp_path: Path) -> None:
    from tests.conftest import nsys_fixture

    path = roofline_csv(tmp_path, "12.5", kernel=MATH + "_gemm")
    code, _, err, _ = run(["report", str(nsys_fixture("nsys2025_sync_apis")), "--ncu", str(path), "-o",
                           str(tmp_path / "r")])
    assert code == 0, err
    assert (tmp_path / "r" / "report.html").exists()


# -- roofline: counters given only as rates per elapsed cycle -------------------------------------
RATE_ONLY = re.compile(r"^(smsp__sass_thread_inst_executed_op_\w+_pred_on)\.(sum|avg|min|max)$")


def standard_capture_raw(tmp_path: Path, drop_all: bool = False) -> Path:
    """A TRANSFORMED real capture: tests/data/roofline/gemm_fp32_raw.csv.xz (the fp32 SGEMM
    4096^3) without the instruction counters that a standard ``ncu --section
    SpeedOfLight_RooflineChart`` capture gives only as ``.sum.per_cycle_elapsed`` (the real file
    has both, so the rate cells are ncu's own).  ``drop_all``: the fp16 counters too, which have
    no rate: a roof with a peak and no counter."""
    rows = list(csv.reader(io.StringIO(lzma.open(ROOFLINE / "gemm_fp32_raw.csv.xz", "rt").read())))
    names = set(rows[0])

    def dropped(name: str) -> bool:
        m = RATE_ONLY.match(name)
        return bool(m) and (drop_all or m.group(1) + ".sum.per_cycle_elapsed" in names)

    keep = [i for i, name in enumerate(rows[0]) if not dropped(name)]
    return _write([[r[i] for i in keep] for r in rows], tmp_path / "transformed_standard_capture_raw.csv")


def _roofline_json(path: Path) -> dict[str, Any]:
    code, out, err, _ = run(["roofline", str(path), "--format", "json"])
    assert code == 0, err
    return strict_json(out)["launches"][0]


def test_flops_from_rates_equal_the_counted_flops(tmp_path: Path) -> None:
    real = _roofline_json(ROOFLINE / "gemm_fp32_raw.csv.xz")
    derived = _roofline_json(standard_capture_raw(tmp_path))
    assert derived["flops"] == pytest.approx(real["flops"], rel=1e-6)
    cases = json.loads((ROOFLINE / "gemm_fp32.cases.json").read_text())
    assert derived["flops"] == pytest.approx(cases[0]["flops"] if isinstance(cases, list) else derived["flops"],
                                             rel=0.01)
    assert (derived["roof"], derived["bound"]) == ("fp32", "compute") == (real["roof"], real["bound"])
    assert derived["verdict"] == real["verdict"]


def test_a_roof_without_counters_names_no_bound(tmp_path: Path) -> None:
    row = _roofline_json(standard_capture_raw(tmp_path, drop_all=True))
    assert row["roof"] is None and row["bound"] is None
    assert row["verdict"].startswith("no bound: this capture lacks counters for fp16")


def test_a_tensor_source_counted_only_by_sparsity_is_no_missing_roof(tmp_path: Path) -> None:
    """A TRANSFORMED real capture: tests/data/roofline/gelu_raw.csv.xz (H100) without the fp8
    source's plain counter (``sm__ops_path_tensor_src_fp8.sum`` and its avg/min/max), as the
    hierarchical chart of an ``--ncu-top`` capture gives fp8 on sm_90: only as
    ``_sparsity_off``/``_sparsity_on`` rates.  Dense plus sparse work is the source's work (0 here),
    so the GELU kernel keeps its memory bound instead of "no bound: lacks counters for fp8"."""
    rows = list(csv.reader(io.StringIO(lzma.open(ROOFLINE / "gelu_raw.csv.xz", "rt").read())))
    plain = re.compile(r"^sm__ops_path_tensor_src_fp8\.(sum|avg|min|max)(\.per_second)?$")
    keep = [i for i, name in enumerate(rows[0]) if not plain.match(name)]
    assert len(keep) < len(rows[0])
    transformed = _write([[r[i] for i in keep] for r in rows], tmp_path / "transformed_fp8_by_sparsity_raw.csv")
    real, derived = _roofline_json(ROOFLINE / "gelu_raw.csv.xz"), _roofline_json(transformed)
    assert derived["missing_counters"] == {} and derived["bound"] == real["bound"] == "memory"
    assert derived["flops"] == pytest.approx(real["flops"], rel=1e-9)
    assert derived["verdict"] == real["verdict"]


# -- strict JSON from every command ----------------------------------------------------------------
def _json_commands(tmp_path: Path) -> list[list[str]]:
    from tests.conftest import _decompressed, nsys_fixture

    nsys = str(nsys_fixture("nsys2025_sync_apis"))
    kineto = str(HIST_RUNS[0])
    ncu = str(ROOFLINE / "gemm_fp32_raw.csv.xz")
    hostile_ncu = str(roofline_csv(tmp_path, "1e308", kernel=MATH))
    out = []
    for trace in (nsys, kineto):
        out += [[c, trace] for c in ("kernels", "steps", "breakdown", "host", "graphs", "stalls")]
        out += [["api", nsys], ["nvtx", nsys], ["info", nsys], ["ranks", trace], ["diff", trace, trace]]
    out += [["roofline", p] for p in (ncu, hostile_ncu)] + [["occupancy", "--ncu", p] for p in (ncu, hostile_ncu)]
    snapshot = _decompressed(Path(__file__).parent / "data" / "memory" / "cs336_snapshots" /
                             "medium_128_inference.pickle.xz")
    out += [["memory", str(snapshot)]]
    return out


def test_every_json_output_is_strict_json(real_history: Path, tmp_path: Path) -> None:
    commands = _json_commands(tmp_path)
    commands.append(["history", "show", "--db", str(real_history), "--plot", str(tmp_path / "p.png")])
    parsed = 0
    for args in commands:
        code, out, err, _ = run([*args, "--format", "json"])
        if code == 2:  # a trace without what the command reads (host: no samples): one line, no JSON
            one_line_error(code, err)
            assert out == ""
            continue
        assert code in (0, 1), (args, err[-500:])
        strict_json(out)
        parsed += 1
    assert parsed >= len(commands) - 3


def test_the_writer_turns_non_finite_values_into_null() -> None:
    from profkit.output import json_text

    text = json_text({"a": float("inf"), "b": [np.float64("nan"), np.float32(1.5), -math.inf], "c": (1, 2.5)})
    assert strict_json(text) == {"a": None, "b": [None, 1.5, None], "c": [1, 2.5]}


# -- diff's bootstrap: bounded memory, the same interval ------------------------------------------
def test_the_bootstrap_of_50k_steps_is_bounded() -> None:
    from profkit.analysis.compare import noise

    rng = np.random.default_rng(7)
    base, new = rng.lognormal(0, 0.2, 50_000), rng.lognormal(0.05, 0.2, 50_000)
    tracemalloc.start()
    change = noise.compare(base, new)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 200 << 20, peak  # a 4,000 x 50,000 array was 1.6 GB, its indexes as much
    assert change.verdict == noise.SLOWER and change.ci_low_pct < change.delta_pct < change.ci_high_pct


def test_m_out_of_n_gives_the_interval_of_the_full_bootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The subsampled bootstrap (m = 3,000 of 12,000 steps, spread scaled by sqrt(m/n)) and the
    full one agree on the interval within a tenth of its width; runs of MAX_DRAW steps or fewer
    get the interval the unchunked bootstrap gave."""
    from profkit.analysis.compare import noise

    rng = np.random.default_rng(11)
    base, new = rng.lognormal(0, 0.3, 12_000), rng.lognormal(0.01, 0.3, 12_000)
    full = noise.compare(base, new)
    monkeypatch.setattr(noise, "MAX_DRAW", 3_000)
    sub = noise.compare(base, new)
    width = full.ci_high_pct - full.ci_low_pct
    assert abs(sub.ci_low_pct - full.ci_low_pct) < 0.1 * width
    assert abs(sub.ci_high_pct - full.ci_high_pct) < 0.1 * width
    small_a, small_b = base[:500], new[:500]
    boot = np.random.default_rng(noise.SEED)
    a = np.median(boot.choice(small_a, size=(noise.RESAMPLES, 500), replace=True), axis=1)
    b = np.median(boot.choice(small_b, size=(noise.RESAMPLES, 500), replace=True), axis=1)
    ratios = 100.0 * (b / a - 1.0)
    low, high = np.percentile(ratios, [2.5, 97.5])
    monkeypatch.setattr(noise, "CHUNK_VALUES", 7_000)  # chunks of 14 resamples: the same draws
    change = noise.compare(small_a, small_b)
    assert (change.ci_low_pct, change.ci_high_pct) == (pytest.approx(low), pytest.approx(high))


# -- SIGTERM: any command ends within 2 s, leaving nothing half-written ---------------------------
@pytest.fixture(scope="module")
def large_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from ingest import build_export  # noqa: E402

    from tests.conftest import nsys_fixture

    big = tmp_path_factory.mktemp("large") / "large.sqlite"
    build_export(nsys_fixture("nsys2025_train_noprint"), big, 200_000, 400_000)
    return big


# (host refuses this export at once: it has no Python stacks; breakdown reads all of it)
@pytest.mark.parametrize("command", ["report", "breakdown", "ranks", "steps"])
def test_sigterm_ends_a_command_within_2_s(command: str, large_export: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    args = [command, str(large_export)] + (["-o", str(out_dir)] if command == "report" else [])
    proc = subprocess.Popen([sys.executable, "-m", "profkit", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    start = time.perf_counter()
    _, err = proc.communicate(timeout=30)
    elapsed = time.perf_counter() - start
    assert proc.returncode in (0, 128 + signal.SIGTERM), (proc.returncode, err[-800:])
    if command == "report":  # 10-16 s on this export: still running when signalled (ranks takes 2 s)
        assert proc.returncode == 128 + signal.SIGTERM
    if proc.returncode:
        assert elapsed < 2, elapsed
        assert b"Traceback" not in err, err[-800:]
        left = sorted(p.name for p in out_dir.iterdir()) if out_dir.exists() else []
        assert left == [], left  # no report file, no temporary one


# -- fuzzing: structure-aware generators (CI-sized; PROFKIT_FUZZ=slow for the long run) -----------
FUZZ_EXAMPLES = 2000 if os.environ.get("PROFKIT_FUZZ") == "slow" else 25
fuzz = settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=os.environ.get("PROFKIT_FUZZ") != "slow",
                suppress_health_check=list(HealthCheck), database=None)

NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers().map(str),
                    st.sampled_from(HOSTILE_NUMBERS + ["n/a", "", "16,384", "1.5e-5", "-0", ".5", "5."]),
                    st.text(alphabet="0123456789.eE+-,", max_size=40))
UNITS = st.sampled_from(["", "%", "byte", "Kbyte", "Gbyte", "Tbyte/second", "ns", "usecond", "cycle", "inst",
                         "Ghz", "inst/cycle", "register/thread", "$", "x/y/z"])
METRICS = st.sampled_from(["dram__bytes.sum", "gpu__time_duration.sum", "launch__registers_per_thread",
                           "launch__block_size", "sm__cycles_elapsed.avg.per_second",
                           "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed",
                           "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
                           "sm__ops_path_tensor_src_bf16.sum", "dram__bytes.sum.peak_sustained",
                           "launch__shared_mem_per_block_static", "launch__grid_size"])
CELL_TEXT = st.text(max_size=30)


@st.composite
def ncu_raw_csv(draw: st.DrawFn) -> str:
    """An ncu raw page: identity columns, metric columns with a units row, launch rows that may be
    ragged, and cells of hostile numbers and text."""
    metrics = draw(st.lists(METRICS, min_size=1, max_size=8, unique=True))
    header = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", *metrics]
    rows = [header, ["", "", "", "", "", *[draw(UNITS) for _ in metrics]]]
    for i in range(draw(st.integers(0, 5))):
        ident = [draw(st.one_of(st.just(str(i)), NUMBERS, CELL_TEXT)), "1", "p", "h", draw(CELL_TEXT)]
        cells = [draw(NUMBERS) for _ in metrics]
        rows.append((ident + cells)[: draw(st.integers(1, len(header) + 2))])
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return draw(st.sampled_from(["", "==PROF== Connected\n", "program output\n"])) + buf.getvalue()


@st.composite
def ncu_details_csv(draw: st.DrawFn) -> str:
    header = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Section Name", "Metric Name",
              "Metric Unit", "Metric Value", *draw(st.sampled_from([[], ["Rule Name", "Rule Type",
                                                                         "Rule Description"]]))]
    rows = [header]
    for _ in range(draw(st.integers(0, 8))):
        row = [draw(st.sampled_from(["0", "1", "x", "99999999999999999999"])), "1", "p", "h", draw(CELL_TEXT),
               draw(st.sampled_from(["Launch Statistics", "GPU Speed Of Light Throughput", "Occupancy"])),
               draw(st.sampled_from(["Duration", "Registers Per Thread", "Block Size", "DRAM Throughput",
                                     "Theoretical Occupancy", "Grid Size", ""])), draw(UNITS), draw(NUMBERS)]
        rows.append(row[: draw(st.integers(1, len(row)))])
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def _read_ncu_text(text: str) -> None:
    """Parse, build launches, roofline rows and their JSON: a result or a ProfkitError, nothing else."""
    from profkit.analysis.roofline import roofline
    from profkit.output import json_text
    from profkit.readers.ncu import parse_csv_text
    from profkit.readers.ncu.launches import launches_from_csv

    try:
        launches = launches_from_csv(parse_csv_text(text))
    except ProfkitError:
        return
    result = roofline(launches)
    strict_json(json_text([launch.as_dict() for launch in launches]))
    strict_json(json_text({"launches": [r.as_dict() for r in result.launches],
                           "kernels": [r.as_dict() for r in result.kernels]}))


@fuzz
@given(ncu_raw_csv())
def test_fuzz_ncu_raw_pages(text: str) -> None:
    _read_ncu_text(text)


@fuzz
@given(ncu_details_csv())
def test_fuzz_ncu_details_pages(text: str) -> None:
    _read_ncu_text(text)


INT64 = st.integers(-(2 ** 63), 2 ** 63 - 1)  # what SQLite stores
SAMPLE_TEXT = st.one_of(
    st.none(), INT64, st.floats(), st.binary(max_size=20), st.text(max_size=30),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=20).map(lambda v: json.dumps(v)),
    st.recursive(st.floats(allow_nan=False, allow_infinity=False) | st.integers(),
                 lambda inner: st.lists(inner, max_size=4), max_leaves=20).map(json.dumps),
    st.integers(0, 3000).map(lambda n: "[" * n + "]" * n),
)
RUN_VALUES = {"label": st.one_of(st.none(), st.text(max_size=20), INT64, st.binary(max_size=5)),
              "commit": st.one_of(st.none(), st.text(max_size=20), st.floats()),
              "steps": st.one_of(st.none(), INT64, st.text(max_size=5)),
              "step_samples": SAMPLE_TEXT, "gpu_samples": SAMPLE_TEXT}


@fuzz
@given(st.fixed_dictionaries({}, optional=RUN_VALUES), st.sampled_from(["gpu_time", "step_median", "kernel:"]))
def test_fuzz_history_rows(real_history: Path, values: dict[str, Any], metric: str) -> None:
    """A stored run's columns replaced by values of any type and sample texts of any shape:
    `trend` gives points or a ProfkitError, and its JSON is strict."""
    from dataclasses import asdict

    from profkit.history import trend
    from profkit.output import json_text

    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"fuzz_history_{os.getpid()}.db"
    shutil.copyfile(real_history, work)
    try:
        with sqlite3.connect(work) as conn:
            for column, value in values.items():
                conn.execute(f'UPDATE runs SET "{column}" = ? WHERE id = 2', (value,))
            if metric == "kernel:":
                (name,) = conn.execute("SELECT name FROM kernels LIMIT 1").fetchone()
                conn.execute("UPDATE kernels SET samples = ? WHERE run_id = 2",
                             (values.get("gpu_samples", "[1.0]"),))
                metric = "kernel:" + name
        try:
            points = trend(work, metric)
        except ProfkitError:
            return
        strict_json(json_text([asdict(p) for p in points]))
    finally:
        work.unlink(missing_ok=True)
