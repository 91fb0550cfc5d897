"""Integer column scans through connectorx: SQLite rows decoded in Rust straight into numpy.

``stats.collect_columns``' own path makes SQLite print every integer as text
(``group_concat``) for numpy to parse back: ~150 ns of CPU a cell.  connectorx
steps the same SELECT in Rust (rusqlite) and writes each value into a numpy
array, ~60 ns a cell, with the GIL released while it reads, so a table that
``Trace.prefetch`` loads on a background thread leaves the main thread free.
On the 1M-kernel export of ``benchmarks/ingest.py`` the report's 17 kernel
columns took 2.7 s of CPU that way and 1.2 s here, the 2.5M API calls' 5
columns 2.4 s and 1.1 s (the SQLite scan itself is ~0.7 s of both).

``scan_ints`` returns None whenever connectorx cannot be used or says
anything but a clean result (not installed, another version, no rows,
a value that is not an integer, a damaged file, a panic): the caller then
runs its sqlite3 path, which owns every error message a user sees.

How the file is opened.  connectorx 0.4.6 opens ``sqlite://PATH`` read-write
(rusqlite's default flags: READ_WRITE | CREATE | URI), and a read-write
connection may roll back a hot journal or checkpoint a WAL into the input.
It hands SQLite the text after the first 9 characters of the parsed URL,
percent-decoded once, with SQLITE_OPEN_URI set; so ``_connection_string``
makes that text an SQLite URI, ``file:PATH?mode=ro&immutable=1``, the
flags ``reader._connect_read_only`` uses: read-only, no locks, no journal or
-wal/-shm file looked for or made.  The path is percent-encoded twice (once
for connectorx's decode, once for SQLite's), so %, ?, #, spaces and
non-ASCII names arrive intact.  That relies on connectorx's internals,
hence ``VERIFIED_VERSIONS``: another version falls back to sqlite3 until
tests/test_fast_scan.py passes with it.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from profkit.model.keys import NULL_INT

# connectorx releases whose SQLite connection string handling was checked
# (tests/test_fast_scan.py: read-only, odd paths, NULLs, bad values).
VERIFIED_VERSIONS = ("0.4.6",)

# connectorx's pandas destination: block kind 1 is a nullable integer column,
# (int64 values, bool mask with True where NULL).
_NULLABLE_INT_BLOCK = 1

_read_sql: Any = None


def _reader() -> Any:
    """connectorx's compiled read_sql (numpy out, no pandas or pyarrow), or None."""
    global _read_sql
    if _read_sql is None:
        _read_sql = False
        if os.environ.get("PROFKIT_NO_CONNECTORX") or os.name != "posix":
            return None
        try:
            import connectorx
            from connectorx import connectorx as compiled
        except ImportError:
            return None
        if getattr(connectorx, "__version__", None) in VERIFIED_VERSIONS:
            _read_sql = compiled.read_sql
    return _read_sql or None


def _connection_string(path: Path) -> str:
    """``path`` as a connectorx SQLite connection string that SQLite opens read-only and immutable.

    connectorx cuts the first 9 characters of the parsed URL ("sqlite://" for
    the usual form); "sqlite:ro" + "file:..." keeps the URL opaque (no
    authority to parse) and leaves SQLite the URI "file:...?..."."""
    encoded = urllib.parse.quote(urllib.parse.quote(str(path.resolve()), safe="/"), safe="/")
    return f"sqlite:rofile:{encoded}?mode=ro&immutable=1"


def scan_ints(path: Path, selects: Sequence[str], source: str, where: str, rowid: str,
              chunks: Sequence[tuple[int, int]], workers: int = 1) -> list[np.ndarray] | None:
    """``SELECT selects FROM source WHERE where`` as int64 arrays (NULL -> ``NULL_INT``), in
    rowid order, one connectorx call per ``chunks`` rowid range, ``workers`` of them at once
    on threads (connectorx releases the GIL while it reads, so two ranges of a big table
    take half the wall time on two cores); None when connectorx cannot give exactly that
    (the caller falls back to sqlite3)."""
    read_sql = _reader()
    if read_sql is None or not selects or not chunks:
        return None
    # The rowid comes along, to check that each range came back in the table's order (the
    # Trace's contract: columns loaded at different times line up).  One call per range,
    # not one call with several queries: connectorx returns a multi-query call's results in
    # the order they finish.
    select_list = ", ".join([*selects, rowid])
    queries = [f"SELECT {select_list} FROM {source} WHERE ({where}) AND {rowid} >= {lo} AND {rowid} < {hi}"
               for lo, hi in chunks]
    connection = _connection_string(path)

    def read(query: str) -> list[np.ndarray] | None:
        try:
            result = read_sql(connection, "pandas", queries=[query], protocol="binary",
                              partition_query=None, pre_execution_queries=None)
        except Exception:  # noqa: BLE001 - any failure: the sqlite3 path reads it again and words the error
            return None
        except BaseException as exc:  # a Rust panic is pyo3's PanicException, a BaseException
            if type(exc).__name__ != "PanicException":
                raise
            return None
        columns = _int_columns(result, len(selects) + 1)  # the masks and blocks go with ``result``
        if columns is not None:
            _put_in_rowid_order(columns)  # within the range; the ranges are gathered in order
        return columns

    capacity = sum(hi - lo for lo, hi in chunks)
    if len(queries) == 1:
        return read(queries[0])
    return _gathered(map(read, queries) if workers <= 1 else _in_order_on_threads(read, queries, workers),
                     len(selects), capacity)


def _in_order_on_threads(read: Any, queries: list[str], workers: int) -> Iterator[list[np.ndarray] | None]:
    """``read`` of each query on ``workers`` threads, the results in query order, at most
    ``workers`` + 1 of them held at once (each one waits until the previous are taken)."""
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="profkit-scan") as pool:
        pending = [pool.submit(read, q) for q in queries[:workers + 1]]
        for query in queries[workers + 1:]:
            yield pending.pop(0).result()
            pending.append(pool.submit(read, query))
        for future in pending:
            yield future.result()


def _gathered(parts: Iterable[list[np.ndarray] | None], n_columns: int, capacity: int) -> list[np.ndarray] | None:
    """The ranges' columns end to end, in range order, copied into columns made once (room
    for every rowid: untouched pages cost nothing) and each range dropped once copied: the
    peak is the table plus the ranges in flight, not two tables.  None if a range failed."""
    columns = [np.empty(capacity, dtype=np.int64) for _ in range(n_columns)]
    filled = 0
    for part in parts:
        if part is None:
            return None
        n = len(part[0])
        for column, values in zip(columns, part):
            column[filled:filled + n] = values
        filled += n
    return [column[:filled] if filled < capacity else column for column in columns]


def _put_in_rowid_order(columns: list[np.ndarray]) -> None:
    """Drop the last column (the rowids) and put the others in rowid order, in place.

    Called per range (``scan_ints`` gathers the ranges in order).  SQLite returns a rowid
    range in rowid order, so this only checks; rows out of order (a table scanned in another
    order) are put back by a stable sort (numpy's radix sort for integers: linear).  The
    peak is one column over the range."""
    rowids = columns.pop()
    if len(rowids) < 2 or bool(np.all(rowids[1:] > rowids[:-1])):
        return
    order = np.argsort(rowids, kind="stable")
    del rowids
    for column in columns:
        # in place, through a copy of one column: connectorx's arrays may be views of one
        # block, which a new array per column would keep alive beside the reordered ones
        np.take(column.copy(), order, out=column)


def _int_columns(result: Any, n_columns: int) -> list[np.ndarray] | None:
    """The int64 columns of connectorx's pandas blocks, NULLs as ``NULL_INT``; None for any other shape."""
    try:
        blocks, infos = result["data"], result["block_infos"]
        if sum(np.size(b[0] if isinstance(b, tuple) else b) for b in blocks) == 0:
            # no rows: connectorx types the columns as text then
            return [np.zeros(0, dtype=np.int64) for _ in range(n_columns)]
        columns: list[np.ndarray | None] = [None] * n_columns
        for info, block in zip(infos, blocks):
            if info.dt != _NULLABLE_INT_BLOCK or len(info.cids) != 1:
                return None  # text or float: a value that is not an integer somewhere
            values, missing = block
            if values.dtype != np.int64 or values.ndim != 1 or not values.flags.writeable:
                return None
            if missing.any():
                values[missing] = NULL_INT
            columns[info.cids[0]] = values
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return None
    if any(c is None for c in columns) or len({len(c) for c in columns}) != 1:  # type: ignore[arg-type]
        return None
    return columns  # type: ignore[return-value]
