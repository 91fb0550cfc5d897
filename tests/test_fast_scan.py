"""connectorx scans (profkit/readers/nsys/fast_scan.py): read-only, any path, NULLs, fallback.

Oracles: the rows the tests themselves wrote (hand-built databases, named
synthetic_*, only for paths, NULLs and bad values), the exports read with plain
sqlite3 queries (test_model_nsys's comparisons, run again on the sqlite3 path),
and the bytes of the input, which must not change.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from profkit.model.keys import NULL_INT
from profkit.errors import ProfkitError
from profkit.readers import open_trace
from profkit.readers.nsys import fast_scan
from tests import test_model_nsys
from tests.conftest import nsys_fixture

pytestmark = pytest.mark.skipif(fast_scan._reader() is None, reason="connectorx (a verified version) not installed")

ROWS = [(1, None, 7), (None, 5, 8), (3, 4, None), (2**40, -(2**40), 9)]


def synthetic_db(path: Path, journal: str = "delete") -> Path:
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA journal_mode = {journal}")
    conn.execute("CREATE TABLE t (a INTEGER, b INTEGER, c INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)", ROWS)
    conn.commit()
    conn.close()
    return path


def expected(column: int) -> list[int]:
    return [NULL_INT if r[column] is None else r[column] for r in ROWS]


def scan(path: Path, selects: list[str] | None = None, chunks=((1, 3), (3, 5))):  # noqa: ANN001, ANN202
    return fast_scan.scan_ints(path, selects or ['"a"', '"b"', '"c"'], "t", "1", "rowid", list(chunks))


@pytest.mark.parametrize("name", ["synthetic plain.sqlite", "synthetic 100%41.sqlite", "synthetic ?x=1&y#z.sqlite",
                                  "synthetic ünïcödé 日本.sqlite", "synthetic +;'\".sqlite", "synthetic %2F%.sqlite"])
def test_any_path_reads_the_rows_and_makes_no_file(name: str, tmp_path: Path) -> None:
    folder = tmp_path / "dir %3F?#"
    folder.mkdir()
    path = synthetic_db(folder / name)
    before = sorted(os.listdir(folder)), sorted(os.listdir(tmp_path)), sorted(os.listdir("."))
    columns = scan(path)
    assert columns is not None
    assert [c.tolist() for c in columns] == [expected(0), expected(1), expected(2)]
    assert all(c.dtype == np.int64 for c in columns)
    assert (sorted(os.listdir(folder)), sorted(os.listdir(tmp_path)), sorted(os.listdir("."))) == before


def _hot_journal(path: Path) -> None:
    """Leave ``path`` mid-transaction: a writer changed pages and died before COMMIT, so a
    hot rollback journal sits beside it (what a crashed writer or a copied pair leaves)."""
    code = f"""
import os, sqlite3
conn = sqlite3.connect({str(path)!r}, isolation_level=None)
conn.execute("PRAGMA cache_size = 2")  # a few pages: the change spills into the file before COMMIT
conn.execute("BEGIN")
conn.execute("UPDATE t SET a = 12345")
conn.execute("CREATE TABLE filler (x BLOB)")
conn.executemany("INSERT INTO filler VALUES (?)", [(bytes(3000),)] * 200)
os._exit(0)
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def test_hot_journal_is_neither_rolled_back_nor_touched(tmp_path: Path) -> None:
    """A read-write connection rolls a hot journal back into the file; fast_scan's connection
    string must open it read-only and immutable, as reader._connect_read_only does."""
    path = synthetic_db(tmp_path / "synthetic_hot.sqlite")
    _hot_journal(path)
    journal = tmp_path / "synthetic_hot.sqlite-journal"
    assert journal.exists()
    digests = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (path, journal)}
    scan(path)
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (path, journal)} == digests
    assert sorted(os.listdir(tmp_path)) == ["synthetic_hot.sqlite", "synthetic_hot.sqlite-journal"]
    # the premise: a read-write connection does roll it back (changing the file, dropping the journal)
    copy = tmp_path / "rw"
    copy.mkdir()
    for p in (path, journal):
        (copy / p.name).write_bytes(p.read_bytes())
    conn = sqlite3.connect(copy / path.name)
    conn.execute("SELECT count(*) FROM t").fetchone()
    conn.close()
    assert not (copy / journal.name).exists()


def test_wal_export_gets_no_wal_or_shm_file(tmp_path: Path) -> None:
    path = synthetic_db(tmp_path / "synthetic_wal.sqlite", journal="wal")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert [c.tolist() for c in scan(path)] == [expected(0), expected(1), expected(2)]
    assert os.listdir(tmp_path) == ["synthetic_wal.sqlite"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_expressions_nulls_and_empty_results(tmp_path: Path) -> None:
    path = synthetic_db(tmp_path / "synthetic_nulls.sqlite")
    # an expression NULL in every chunk's first row: typed through coalesce, as stats._fast_select writes it
    diff = scan(path, [f'coalesce(("a") - ("b"), {NULL_INT})'], chunks=[(1, 3), (3, 5)])
    assert diff is not None and diff[0].tolist() == [NULL_INT, NULL_INT, -1, 2**41]
    empty = fast_scan.scan_ints(path, ['"a"'], "t", "a > 1e300", "rowid", [(1, 5)])
    assert empty is not None and empty[0].dtype == np.int64 and len(empty[0]) == 0


@pytest.mark.parametrize("bad", ["'12abc'", "2.5", "x'00ff'"])
def test_a_value_that_is_no_integer_falls_back(bad: str, tmp_path: Path) -> None:
    path = synthetic_db(tmp_path / "synthetic_bad.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE t SET b = {bad} WHERE rowid = 3")
    assert scan(path) is None


def test_a_text_value_in_a_kernel_column_is_the_sqlite3_paths_error(tmp_path: Path) -> None:
    """connectorx refuses the value; the sqlite3 path then words the error, as without connectorx."""
    path = tmp_path / "synthetic_text_start.sqlite"
    path.write_bytes(nsys_fixture("nsys2025_gelu").read_bytes())
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon' WHERE rowid = 5")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with open_trace(path) as trace, pytest.raises(ProfkitError, match="values that are not integers"):
        trace.array("kernels", "start")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_nulls_in_an_export_are_the_models_missing_value(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    path = tmp_path / "synthetic_null_columns.sqlite"
    path.write_bytes(nsys_fixture("nsys2025_gelu").read_bytes())
    with sqlite3.connect(path) as conn:  # three of the columns nsys declares nullable
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET sharedMemoryExecuted = NULL, globalPid = NULL, "
                     "correlationId = NULL WHERE rowid IN (1, 7)")
        raw = conn.execute("SELECT sharedMemoryExecuted, correlationId, (globalPid >> 24) & 16777215 "
                           "FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid").fetchall()
    answers = []
    scan_ints = fast_scan.scan_ints
    monkeypatch.setattr(fast_scan, "scan_ints", lambda *a: answers.append(scan_ints(*a)) or answers[-1])
    with open_trace(path) as trace:
        # in one scan wide enough for connectorx (stats.FAST_SCAN_MIN_COLUMNS)
        trace.table("kernels", ["smem_config_bytes", "correlation", "pid", "start", "end"])
        got = zip(*(trace.array("kernels", c).tolist() for c in ("smem_config_bytes", "correlation", "pid")))
        assert list(got) == [tuple(-1 if v is None else v for v in row) for row in raw]
    assert raw[0] == (None, None, None) and None not in raw[1]
    assert answers and None not in answers  # read by connectorx, not by the fallback


@pytest.fixture(params=["nsys2025_train_print", "nsys2023_sync_apis"])
def sqlite3_only(request, monkeypatch):  # noqa: ANN001, ANN201
    """A fixture's trace read without connectorx (the fallback every bad case ends in)."""
    monkeypatch.setattr(fast_scan, "_read_sql", False)
    trace = open_trace(nsys_fixture(request.param))
    yield request.param, trace
    trace.close()


def test_sqlite3_path_equals_the_export(sqlite3_only) -> None:  # noqa: ANN001
    test_model_nsys.test_kernel_columns_equal_the_export(sqlite3_only)
    test_model_nsys.test_api_names_layers_and_threads(sqlite3_only)
    test_model_nsys.test_every_table_has_the_export_rows_and_the_model_kinds(sqlite3_only)


def test_many_chunks_come_back_in_rowid_order() -> None:
    """The ranges run on threads and finish in any order; the rows must still be in the
    table's order (columns loaded at different times line up), whatever the chunking.
    Oracle: the same columns selected with plain sqlite3, ORDER BY rowid."""
    export = nsys_fixture("nsys2025_gpt_eager")
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    with sqlite3.connect(f"file:{export}?mode=ro", uri=True) as db:
        rows = db.execute(f'SELECT rowid, start, "end", correlationId FROM {table} ORDER BY rowid').fetchall()
    lo, hi = rows[0][0], rows[-1][0] + 1
    step = max(1, (hi - lo) // 64)
    chunks = [(start, start + step) for start in range(lo, hi, step)]
    assert len(chunks) >= 64
    for workers in (1, 2, 4, 4, 8):  # on threads, the finishing order varies from run to run
        columns = fast_scan.scan_ints(export, ["start", '"end"', "correlationId"], table, "1", "rowid", chunks,
                                      workers)
        assert columns is not None
        assert [c.tolist() for c in columns] == [[r[i] for r in rows] for i in (1, 2, 3)]


def test_out_of_order_runs_are_put_back_in_order() -> None:
    """The reordering itself, on runs in every order (and rows no chunk ever gives: a fallback sort)."""
    rowids = np.array([7, 8, 9, 1, 2, 3, 4, 5, 6], dtype=np.int64)
    columns = [rowids * 10, rowids.copy()]
    fast_scan._put_in_rowid_order(columns)
    assert [c.tolist() for c in columns] == [list(range(10, 100, 10))]
    shuffled = np.array([3, 1, 2], dtype=np.int64)
    columns = [shuffled * 10, shuffled.copy()]
    fast_scan._put_in_rowid_order(columns)
    assert columns[0].tolist() == [10, 20, 30]
