"""Column scans of nsys exports, fast: the SQL half of nsys-equal statistics.

The statistics themselves (count, total, avg, median, min, max, stddev,
rounded the way each nsys release rounds) are pure numpy and live in
``profkit.analysis.kernels.grouped_stats``; this module gets the columns out of
SQLite (``collect_columns``).

Speed: SQLite has no hash aggregation, so ``GROUP BY`` on an unindexed
column sorts every row, and the export is read-only (no index can be added).
``GROUP BY`` with median/stdev as Python aggregates took 1.4 s for 1M
kernels.  Instead one table scan streams only the group key and the value
out of SQLite (as ``group_concat`` text parsed by numpy, see
``collect_columns``) into two int64 arrays, 16 bytes per row (40 MB for 2.5M
rows), and numpy groups them: 0.35 s for the same 1M kernels.  Memory is
proportional to the two columns, never to the table.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from profkit.model.keys import NULL_INT
from profkit.errors import ProfkitError
from profkit.readers.nsys import fast_scan
from profkit.readers.nsys.reader import SQLITE_ERRORS, NsysExport

_collector_ids = itertools.count()



@dataclass(frozen=True)
class ColumnsQuery:
    """A scan that yields aligned columns: integer expressions and object (text) expressions.

    ``source`` is the FROM clause (a table, maybe with joins), ``table`` the
    driving table whose ``rowid`` (spelled ``rowid``) chunks the scan, and
    ``with_clause`` optional CTEs the source refers to.
    """

    table: str
    source: str
    int_columns: tuple[str, ...]
    text_columns: tuple[str, ...] = ()
    where: str = "1"
    rowid: str = "rowid"
    with_clause: str = ""


# NULL_INT (profkit.model.keys) stands for NULL in integer columns
# (group_concat skips NULLs, which would misalign the columns).
# Rows per group_concat chunk: the text of a chunk is ~20 bytes per row and
# column, so chunks keep transient strings near 5 MB per column.
CHUNK_ROWS = 250_000
CHUNK_CELLS = 1_000_000


def collect_columns(export: NsysExport, query: ColumnsQuery,
                    keep: Callable[[list[np.ndarray]], np.ndarray] | None = None,
                    ) -> tuple[list[np.ndarray], list[list[Any]]]:
    """Run a ``ColumnsQuery`` and return its integer columns as int64 arrays
    and its text columns as lists, row-aligned.

    Integer columns leave SQLite as one ``group_concat`` string per chunk of
    rows and are parsed by numpy in C: about 8x faster than fetching rows as
    Python tuples.  All aggregates of one SELECT see the same rows in the same
    order, so the columns line up.  Text columns are appended by aggregate
    functions whose ``step`` is ``list.append`` (no Python frame per row).

    The scan is chunked by rowid (CHUNK_ROWS rows per query), so no string
    grows past ~20 bytes x CHUNK_ROWS per column.  Integer-only scans of big tables run their chunks
    on several read-only connections at once: sqlite3 releases the GIL while
    SQLite steps, so the chunks really run in parallel.

    Integer-only scans of one table go through connectorx first (``fast_scan``:
    the same rows, ~2x less CPU, the GIL released throughout); this path runs
    where it cannot (text columns, CTEs, no connectorx, any error).
    """
    # Two subqueries: SQLite answers a lone min(rowid) or max(rowid) from the b-tree's
    # ends, but both in one SELECT scan the table (0.6 s on 2.5M rows).
    bounds = export.rows(f'SELECT (SELECT min(rowid) FROM "{query.table}"), (SELECT max(rowid) FROM "{query.table}")')
    lo, hi = bounds[0] if bounds else (None, None)
    texts: list[list[Any]] = [[] for _ in query.text_columns]
    if lo is None:
        return [np.zeros(0, dtype=np.int64) for _ in query.int_columns], texts
    workers = _workers(hi - lo + 1) if not query.text_columns else 1
    # Equal chunks, a multiple of the worker count, none above CHUNK_ROWS.  Rows per chunk
    # fall as columns grow: a chunk's text stays near CHUNK_CELLS values, and so does a
    # connectorx range, which is held twice (with its NULL masks) until copied into the
    # columns, ``workers`` + 1 of them at once (20 kernel columns in 250k-row ranges were
    # 135 MB).
    chunk_rows = max(CHUNK_ROWS // 10, CHUNK_CELLS // max(1, len(query.int_columns) + len(query.text_columns)))
    chunk_rows = min(chunk_rows, CHUNK_ROWS)
    n_chunks = workers * -(-(hi - lo + 1) // (workers * chunk_rows))
    size = -(-(hi - lo + 1) // n_chunks)
    chunks = [(start, min(start + size, hi + 1)) for start in range(lo, hi + 1, size)]
    if (not query.text_columns and not query.with_clause and keep is None
            and len(query.int_columns) >= FAST_SCAN_MIN_COLUMNS):
        # connectorx where it can (see fast_scan), the same chunks on ``workers`` threads
        fast = fast_scan.scan_ints(export.path, [_fast_select(expr) for expr in query.int_columns], query.source,
                                   query.where, query.rowid, chunks, workers)
        if fast is not None:
            return fast, texts
    selects = [f"group_concat(coalesce(({expr}), {NULL_INT}))" for expr in query.int_columns]
    tag = next(_collector_ids)
    sink_names = [f"_profkit_text{tag}_{i}" for i in range(len(query.text_columns))]
    selects += [f"{name}(({expr}))" for name, expr in zip(sink_names, query.text_columns)]
    sql = (f"{query.with_clause} SELECT {', '.join(selects)} FROM {query.source} "
           f"WHERE ({query.where}) AND {query.rowid} >= ? AND {query.rowid} < ?")
    n_ints = len(query.int_columns)

    if keep is not None and query.text_columns:
        raise ValueError("keep= filters integer-only queries")

    def parse(row: tuple) -> list[np.ndarray]:
        try:
            columns = [np.fromstring(text, dtype=np.int64, sep=",") if text else _EMPTY for text in row[:n_ints]]
        except ValueError:
            # text or a float where nsys writes integers (a damaged or hand-edited file)
            raise ProfkitError(f"{export.path.name}: {query.source.split()[0]} holds values that are not "
                               "integers where nsys writes integers", hint="export it again") from None
        if keep is not None and len(columns[0]):
            mask = keep(columns)
            columns = [c[mask] for c in columns]
        return columns

    # Each chunk's values go straight into the columns, in chunk order, and the chunk is
    # dropped: the peak is the columns plus the chunks in flight, not twice the data.
    # np.empty maps pages lazily, so rows a WHERE or ``keep`` leaves out cost nothing.
    capacity = hi - lo + 1
    columns = [np.empty(capacity, dtype=np.int64) for _ in range(n_ints)]
    filled = 0

    def put(part: list[np.ndarray]) -> None:
        nonlocal filled
        n = len(part[0]) if part else 0
        if any(len(values) != n for values in part):
            raise RuntimeError(f"misaligned columns reading {query.table}")  # a bug, not a user error
        for column, values in zip(columns, part):
            column[filled:filled + n] = values
        filled += n

    if workers > 1:
        _parallel_chunks(export, sql, chunks, workers, parse, put)
    else:
        for name, target in zip(sink_names, texts):
            export.conn.create_aggregate(name, 1, _list_sink(target))
        try:
            for chunk in chunks:
                put(parse(export.rows(sql, chunk)[0]))
        finally:
            for name in sink_names:
                export.conn.create_aggregate(name, 1, None)
    columns = [c[:filled] for c in columns]
    if any(len(t) != filled for t in texts) and n_ints:
        raise RuntimeError(f"misaligned columns reading {query.table}")  # a bug, not a user error
    return columns, texts


_EMPTY = np.zeros(0, dtype=np.int64)
# Narrow scans (`profkit kernels`: names and durations) stay on the sqlite3 path below:
# on 1M kernels it took 0.97-1.06 s wall against 1.13-1.27 s through connectorx, both
# split across the cores (connectorx's per-call start-up and its NULL masks cost more
# than parsing two columns of text).  For the report's 17 kernel and 6 API columns
# connectorx wins on CPU, wall time and the GIL (released).
FAST_SCAN_MIN_COLUMNS = 4
_PLAIN_COLUMN = re.compile(r'"?[A-Za-z_][A-Za-z0-9_]*"?')


def _fast_select(expr: str) -> str:
    """An integer expression for ``fast_scan``: a plain column as it is (SQLite declares it
    INTEGER, so connectorx types it even when its first value is NULL, and no coalesce runs
    per row), anything else never NULL (connectorx types an expression by its first value)."""
    plain = _PLAIN_COLUMN.fullmatch(expr) and expr.upper() != "NULL"
    return expr if plain else f"coalesce(({expr}), {NULL_INT})"


PARALLEL_MIN_ROWS = 400_000


def _workers(rows: int) -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, 8, rows // (PARALLEL_MIN_ROWS // 2))) if rows >= PARALLEL_MIN_ROWS else 1


def _parallel_chunks(export: NsysExport, sql: str, chunks: list[tuple[int, int]], workers: int,
                     parse: Any, put: Callable[[list[np.ndarray]], None]) -> None:
    """Run ``sql`` once per rowid chunk on ``workers`` connections; ``put`` each parsed chunk, in chunk order."""
    local = threading.local()
    opened: list[Any] = []
    lock = threading.Lock()

    def run(chunk: tuple[int, int]) -> list[np.ndarray]:
        conn = getattr(local, "conn", None)
        try:
            if conn is None:
                conn = local.conn = export.new_connection()
                with lock:
                    opened.append(conn)
                if export.scan_mmap_bytes:
                    conn.execute(f"PRAGMA mmap_size = {int(export.scan_mmap_bytes)}")
            row = conn.execute(sql, chunk).fetchone()
        except SQLITE_ERRORS as exc:
            raise export._damage(exc) from None
        return parse(row)

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for part in pool.map(run, chunks):
                put(part)
    finally:
        for conn in opened:
            conn.close()


def _list_sink(target: list[Any]) -> type:
    class Sink:
        def __init__(self) -> None:
            self.step = target.append

        def finalize(self) -> None:
            return None

    return Sink
