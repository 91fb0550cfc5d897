"""Open an Nsight Systems SQLite export read-only, validate it, detect its schema.

Everything that reads an nsys export goes through ``open_export``.  It turns
every way a file can be wrong (missing, unreadable, not SQLite, truncated,
SQLite but not nsys) into a one-line ``ProfkitError``, and it never writes:
the connection is ``mode=ro&immutable=1``, so SQLite creates no journal,
-wal or -shm file next to the input and takes no locks on it.

Schema differences handled here (the queries in ``queries.py`` build on them):

- NVTX text lives in ``NVTX_EVENTS.text`` (inline) or ``textId`` (a
  ``StringIds`` key); schema 3.7 (nsys 2023.4) has both columns, later
  schemas may drop ``text``.  ``nvtx_text_sql`` writes the right expression.
- ``globalTid`` packs the process and thread ids; see ``decode_global_tid``.
- CUDA API names carry a version suffix (``cudaLaunchKernel_v7000``);
  ``normalize_api_name`` strips it the way nsys's cuda_api_sum does.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from profkit.errors import ProfkitError
from profkit.limits import VARIABLES, LimitExceeded
from profkit.limits import current as current_limits
from profkit.readers.sqlite_input import (PROGRESS_STEPS, SQLITE_MAGIC, GuardedConnection, connect,  # noqa: F401
                                          guard_connection, is_interrupted, restart_budget, stopped_query)
from profkit.model.trace import DECIMAL_HALF_UP, SQLITE_LEGACY

# globalTid layout used by every nsys report script (e.g. nvtx_kern_sum.py:
# "(r.globalTid >> 24) & 0x00FFFFFF AS pid, r.globalTid & 0x00FFFFFF AS tid",
# and "k.globalPid == (r.globalTid & 0xFFFFFFFFFF000000)"): bits 0-23 hold the
# thread id, bits 24-47 the process id, the bits above them the VM/host.
GLOBAL_TID_PID_SHIFT = 24
GLOBAL_TID_ID_MASK = 0xFFFFFF
GLOBAL_PID_MASK = 0xFFFFFFFFFF000000


def decode_global_tid(global_tid: int) -> tuple[int, int]:
    """``(pid, tid)`` from an nsys ``globalTid`` (or ``(pid, 0)`` from a ``globalPid``)."""
    return (global_tid >> GLOBAL_TID_PID_SHIFT) & GLOBAL_TID_ID_MASK, global_tid & GLOBAL_TID_ID_MASK


def pid_sql(column: str) -> str:
    """SQL for the process id packed in a ``globalTid``/``globalPid`` column."""
    return f"(({column} >> {GLOBAL_TID_PID_SHIFT}) & {GLOBAL_TID_ID_MASK})"


def tid_sql(column: str) -> str:
    """SQL for the thread id packed in a ``globalTid`` column."""
    return f"({column} & {GLOBAL_TID_ID_MASK})"


def global_pid_sql(column: str) -> str:
    """SQL turning a ``globalTid`` into the ``globalPid`` of its process.

    The mask is written in hex: SQLite reads a decimal literal above 2**63 as a
    float, and ``&`` with a float gives the wrong bits."""
    return f"({column} & 0x{GLOBAL_PID_MASK:X})"




def api_name_sql(expr: str) -> str:
    """SQL form of ``normalize_api_name`` (copied from cuda_api_sum.py)."""
    return (
        f"CASE substr({expr}, -6, 2) WHEN '_v' "
        f"THEN substr({expr}, 1, length({expr}) - 6) ELSE {expr} END"
    )


class NsysExport:
    """An open, validated nsys SQLite export.  Use ``open_export`` to get one.

    ``conn`` is a read-only connection; queries should go through ``rows`` /
    ``scalar`` so that a damaged file becomes a ProfkitError, not a traceback.
    """

    def __init__(self, path: Path, conn: sqlite3.Connection, tables: set[str]) -> None:
        self.path = path
        self.conn = conn
        self.tables = tables
        self._columns: dict[str, set[str]] = {}
        # Bytes of the file each parallel scan connection may memory-map
        # (PRAGMA mmap_size).  Mapping skips a copy per page (~10 % faster
        # scans), but mapped pages count as resident memory, so it is off
        # unless a caller that reads one table and exits turns it on.
        self.scan_mmap_bytes: int = 0
        meta = self.meta_table("META_DATA_EXPORT")
        self.export_meta: dict[str, str] = meta
        self.schema_version: str | None = meta.get("EXPORT_SCHEMA_VERSION") or _joined_version(meta)
        self.nsys_version: str | None = _first(meta, "EXPORT_PRODUCT_VERSION")
        # Summaries equal the `nsys stats` of the nsys release that wrote the
        # export; match_nsys_stats() switches to another release's habits.
        self.rounding_mode: str = ""
        self.nvtx_default_domain_prefix: bool = False
        self.match_nsys_stats(self._release_year())

    def match_nsys_stats(self, year: int) -> None:
        """Make summaries equal the ``nsys stats`` of the nsys release of ``year``.

        Two habits changed between nsys 2023.4 and 2025.3 (seen on the same
        exports; where in 2024 they changed is not known, 2024 counts as new):
        - rounding of avg/med/stddev: 2023.4 ships SQLite 3.42 (legacy printf
          rounding), 2025.3 rounds the exact value half up (model.trace.ROUNDING_MODES);
        - nvtx_sum names a range of the default domain ":text" in 2025.3 and
          "text" in 2023.4.
        """
        self.rounding_mode = SQLITE_LEGACY if year < 2024 else DECIMAL_HALF_UP
        self.nvtx_default_domain_prefix = year >= 2024

    def _release_year(self) -> int:
        """The nsys release year from META_DATA_EXPORT; schema 3.7 and older count as 2023."""
        year = _leading_int(self.nsys_version)
        if year is not None:
            return year
        schema = tuple(_leading_ints(self.schema_version))
        return 2023 if schema and schema <= (3, 7) else 2025

    # -- context manager -------------------------------------------------
    def __enter__(self) -> NsysExport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    def new_connection(self) -> sqlite3.Connection:
        """Another read-only connection to the same file (for parallel scans)."""
        return _connect_read_only(self.path)

    def __repr__(self) -> str:
        return f"NsysExport({str(self.path)!r}, schema={self.schema_version!r})"

    # -- schema ----------------------------------------------------------
    def has_table(self, name: str) -> bool:
        return name in self.tables

    def columns(self, table: str) -> set[str]:
        """Column names of a table (empty if the table is absent)."""
        if table not in self._columns:
            if table not in self.tables:
                return set()
            # table names come from sqlite_master, never from users.
            rows = self.rows(f'SELECT name FROM pragma_table_info("{table}")')
            self._columns[table] = {r[0] for r in rows}
        return self._columns[table]

    def has_column(self, table: str, column: str) -> bool:
        return column in self.columns(table)

    def require(self, table: str, what: str, trace_flag: str | None = None) -> None:
        """Raise a ProfkitError naming the missing data and the nsys option that records it."""
        if table in self.tables:
            return
        hint = f"re-run nsys profile with -t {trace_flag}" if trace_flag else None
        raise ProfkitError(f"{self.path.name} has no {what}: table {table} is missing", hint=hint)

    def require_columns(self, table: str, columns: Sequence[str], what: str) -> None:
        missing = [c for c in columns if c not in self.columns(table)]
        if missing:
            raise ProfkitError(
                f"{self.path.name}: {table} lacks column(s) {', '.join(missing)} needed for {what}",
                hint="export it again with a recent nsys: nsys export --type sqlite REPORT.nsys-rep",
            )

    def meta_table(self, table: str) -> dict[str, str]:
        """A ``name, value`` metadata table (META_DATA_EXPORT, META_DATA_CAPTURE) as a dict."""
        if table not in self.tables or not {"name", "value"} <= self.columns(table):
            return {}
        return {str(k): str(v) for k, v in self.rows(f'SELECT name, value FROM "{table}"') if k is not None}

    # -- SQL helpers -----------------------------------------------------
    def string_sql(self, id_expr: str) -> str:
        """SQL resolving a StringIds key to its text (``StringIds.id`` is the primary key)."""
        return f"(SELECT value FROM StringIds WHERE id = {id_expr})"

    def nvtx_text_sql(self, alias: str = "ne") -> str:
        """SQL for an NVTX event's text, whether stored inline (``text``) or as ``textId``.

        nsys prefers the StringIds value and falls back to the inline text
        (nvtx_sum.py: ``WHEN sid.value NOT NULL THEN sid.value ELSE ne.text``).
        """
        cols = self.columns("NVTX_EVENTS")
        parts = []
        if "textId" in cols and "StringIds" in self.tables:
            parts.append(self.string_sql(f"{alias}.textId"))
        if "text" in cols:
            parts.append(f"{alias}.text")
        if not parts:
            return "NULL"
        return parts[0] if len(parts) == 1 else f"coalesce({', '.join(parts)})"

    def strings(self, ids: Sequence[int]) -> dict[int, str]:
        """Resolve StringIds keys in Python (for a handful of ids, not per row)."""
        out: dict[int, str] = {}
        unique = sorted({i for i in ids if i is not None})
        for start in range(0, len(unique), 500):
            chunk = unique[start : start + 500]
            marks = ",".join("?" * len(chunk))
            out.update(self.rows(f"SELECT id, value FROM StringIds WHERE id IN ({marks})", chunk))
        return out

    # -- query execution with file-damage errors -------------------------
    def rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple]:
        """Run a query and fetch all rows; a damaged file raises ProfkitError."""
        restart_budget(self.conn)
        try:
            return self.conn.execute(sql, params).fetchall()
        except SQLITE_ERRORS as exc:
            raise self._damage(exc) from None

    def iter_rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = (), batch: int = 10_000) -> Iterator[tuple]:
        """Stream rows in batches (bounded memory for million-row tables)."""
        restart_budget(self.conn)
        try:
            cur = self.conn.execute(sql, params)
            while chunk := cur.fetchmany(batch):
                yield from chunk
        except SQLITE_ERRORS as exc:
            raise self._damage(exc) from None

    def scalar(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        rows = self.rows(sql, params)
        return rows[0][0] if rows else None

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> None:
        """Run a statement that returns nothing (temp tables, pragmas)."""
        restart_budget(self.conn)
        try:
            self.conn.execute(sql, params)
        except SQLITE_ERRORS as exc:
            raise self._damage(exc) from None

    def _damage(self, exc: Exception) -> ProfkitError:
        """A ProfkitError for a damaged file, an unsupported schema, or any other SQLite error."""
        text = _message(exc)
        if is_interrupted(exc):
            return stopped_query(self.conn, self.path)
        if isinstance(exc, sqlite3.OperationalError) and text.startswith("no such"):
            # A table or column this schema lacks that no requirement check
            # caught: report it with the schema version so it can be fixed.
            return ProfkitError(
                f"{self.path.name}: unsupported nsys export schema {self.schema_version or '?'} ({text})",
                hint="please report it with the nsys version that made the file",
            )
        if isinstance(exc, UnicodeDecodeError) or any(marker in text for marker in _DAMAGE_MARKERS):
            return ProfkitError(f"{self.path.name} is damaged or truncated ({text})",
                                hint="export it again: nsys export --type sqlite REPORT.nsys-rep")
        # Anything else (a value of the wrong type where nsys writes integers,
        # a bug in profkit's SQL) is still one line, never a traceback.
        return ProfkitError(f"{self.path.name}: cannot read it ({type(exc).__name__}: {text})",
                            hint="please report it with the nsys version that made the file")


# sqlite3 messages that mean the file's bytes are bad, not the query.
_DAMAGE_MARKERS = ("malformed", "not a database", "disk I/O error", "corrupt", "short read", "database or disk is full",
                   "Could not decode to UTF-8", "file is not a database")
# What reading a damaged file can raise: SQLite's errors, and UnicodeDecodeError
# when the error message itself quotes bytes that are not UTF-8 (a damaged
# schema makes the first statement, even a PRAGMA, fail that way).
SQLITE_ERRORS = (sqlite3.Error, UnicodeDecodeError)


def _message(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "text that is not UTF-8 where SQLite expects its schema or a string"
    return str(exc)


# A version part longer than this is not a version (a damaged export); Python
# also refuses int() on more than 4,300 digits.
MAX_VERSION_DIGITS = 12


def _leading_ints(version: str | None) -> list[int]:
    out = []
    for part in (version or "").split("."):
        if not part.isdigit() or len(part) > MAX_VERSION_DIGITS:
            break
        out.append(int(part))
    return out


def _leading_int(version: str | None) -> int | None:
    parts = _leading_ints(version)
    return parts[0] if parts else None


def _first(d: dict[str, str], *keys: str) -> str | None:
    for k in keys:
        if d.get(k):
            return d[k]
    return None


def _joined_version(meta: dict[str, str]) -> str | None:
    parts = [meta.get(f"EXPORT_SCHEMA_VERSION_{p}") for p in ("MAJOR", "MINOR", "MICRO")]
    if all(parts):
        return ".".join(parts)  # type: ignore[arg-type]
    return None


# Tables whose presence marks a file as an nsys export.  Every nsys export
# has StringIds; META_DATA_EXPORT exists since schema 2.x.
_NSYS_MARKER_TABLES = ("META_DATA_EXPORT", "StringIds")

_EXPORT_HINT = "export it first: nsys export --type sqlite REPORT.nsys-rep"


def open_export(path: str | os.PathLike[str]) -> NsysExport:
    """Open an nsys SQLite export read-only and check that it is one.

    Raises ProfkitError (one line) for a missing, unreadable, non-SQLite,
    truncated or non-nsys file.  The file is never modified.
    """
    p = Path(path)
    _check_file(p)
    _check_sqlite_header(p)
    conn = _connect_read_only(p)
    try:
        # Tables only: nsys writes no views, and a view is any query at all (an
        # endless recursive CTE named CUPTI_ACTIVITY_KIND_KERNEL).
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except SQLITE_ERRORS as exc:
        conn.close()
        if "not a database" in str(exc) or "encrypted" in str(exc):
            raise ProfkitError(f"{p} is not an SQLite database", hint=_EXPORT_HINT) from None
        raise ProfkitError(f"{p} is damaged or truncated ({_message(exc)})", hint=_EXPORT_HINT) from None
    if not any(t in tables for t in _NSYS_MARKER_TABLES):
        conn.close()
        raise ProfkitError(
            f"{p} is an SQLite database but not an Nsight Systems export (no StringIds or META_DATA_EXPORT table)",
            hint=_EXPORT_HINT,
        )
    export = NsysExport(p, conn, tables)
    _check_readable_tail(export)
    _check_string_lengths(export)
    return export


def _check_string_lengths(export: NsysExport) -> None:
    """Every name of an export is a StringIds value: one scan finds one longer than the limit
    (``length`` counts characters up to a NUL; an environ block is scrubbed, not named)."""
    if "StringIds" not in export.tables or "value" not in export.columns("StringIds"):
        return
    limit = current_limits().max_string
    longest = export.scalar("SELECT max(length(value)) FROM StringIds")
    if isinstance(longest, int) and longest > limit:
        export.close()
        raise LimitExceeded(f"{export.path.name} holds a string of {longest:,} characters (a name or text), "
                            f"more than the {limit:,} allowed", VARIABLES["max_string"])


# -- stopping a query: the time budget and the stop on signals live in profkit.readers.sqlite_input,
# the guard of every SQLite file profkit opens; imported here for the callers that name them from here.


def _check_file(p: Path) -> None:
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ProfkitError(f"{p}: no such file") from None
    except PermissionError:
        raise ProfkitError(f"{p}: permission denied") from None
    except OSError as exc:
        raise ProfkitError(f"{p}: cannot read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ProfkitError(f"{p} is a directory, not an nsys SQLite export")
    if not stat.S_ISREG(st.st_mode):
        raise ProfkitError(f"{p} is not a regular file")
    if not os.access(p, os.R_OK):
        raise ProfkitError(f"{p}: permission denied (cannot read it)")


XZ_MAGIC = b"\xfd7zXZ\x00"
# what writes each kind of input profkit reads, by the name a file was given: an empty or
# unreadable file is told how the kind its name promises is made
_HINTS_BY_SUFFIX = {
    ".json": "a PyTorch profiler trace is written by prof.export_chrome_trace(PATH) or tensorboard_trace_handler",
    ".gz": "a PyTorch profiler trace is written by prof.export_chrome_trace(PATH) or tensorboard_trace_handler",
    ".pickle": "a memory snapshot is written by torch.cuda.memory._dump_snapshot(PATH)",
    ".pkl": "a memory snapshot is written by torch.cuda.memory._dump_snapshot(PATH)",
}


def _hint_for_name(p: Path) -> str:
    """How the input a file's name promises is made (an nsys SQLite export unless the name says other)."""
    return _HINTS_BY_SUFFIX.get(p.suffix.lower(), _EXPORT_HINT)


def _check_sqlite_header(p: Path) -> None:
    """Reject non-SQLite and truncated files before SQLite sees them.

    SQLite opens an empty or short file as an empty database and only fails
    deep inside a query; the 100-byte header tells us the page size and the
    page count, so a file shorter than page_size * page_count was cut off.
    """
    try:
        size = p.stat().st_size
        with open(p, "rb") as fh:
            header = fh.read(100)
    except PermissionError:
        raise ProfkitError(f"{p}: permission denied") from None
    except OSError as exc:
        raise ProfkitError(f"{p}: cannot read ({exc.strerror or exc})") from None
    if not header.startswith(SQLITE_MAGIC):
        what = "an empty file" if size == 0 else "not an SQLite database"
        hint = _hint_for_name(p)
        if header.startswith(b"PK") or p.suffix in (".nsys-rep", ".qdrep", ".qdstrm"):
            what = "not an SQLite database (it looks like an nsys report, not its SQLite export)"
        elif header.startswith(XZ_MAGIC):
            what = "xz-compressed"
            hint = (f"decompress it first: xz -dk {p.name}" if p.suffix == ".xz" else
                    f"decompress it first: xz -dc {p.name} > FILE, then give profkit FILE")
        raise ProfkitError(f"{p} is {what}", hint=hint)
    if len(header) < 100:
        raise ProfkitError(f"{p} is truncated ({size} bytes, shorter than an SQLite header)", hint=_EXPORT_HINT)
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    page_count = int.from_bytes(header[28:32], "big")
    change_counter = int.from_bytes(header[24:28], "big")
    valid_for = int.from_bytes(header[92:96], "big")
    # The in-header page count is only trusted when "version-valid-for"
    # matches the change counter (SQLite file format, section 1.3.7).
    if page_count and change_counter == valid_for:
        expected = page_count * page_size
        if size < expected:
            raise ProfkitError(
                f"{p} is truncated ({size:,} bytes, its header says {expected:,})",
                hint="copy or export it again",
            )
    elif page_size and size % page_size:
        raise ProfkitError(f"{p} is truncated ({size:,} bytes, not a whole number of pages)",
                           hint="copy or export it again")


def _connect_read_only(p: Path) -> sqlite3.Connection:
    # immutable=1: SQLite neither locks the file nor looks for a journal/WAL,
    # so nothing is ever created next to the input.  nsys's own report
    # framework opens exports the same way (nsysstats.py).
    try:
        conn = connect(p, read_only=True)
    except SQLITE_ERRORS as exc:
        raise ProfkitError(f"{p} cannot be opened as SQLite ({_message(exc)})", hint=_EXPORT_HINT) from None
    try:
        # A 16 MiB page cache: summaries scan tables once, so a bigger cache
        # only adds resident memory (the OS caches the file anyway); temp
        # tables spill to a temp file beyond it, so memory stays bounded.
        conn.execute("PRAGMA cache_size = -16384")
        conn.execute("PRAGMA temp.cache_size = -16384")
    except SQLITE_ERRORS as exc:
        conn.close()
        raise ProfkitError(f"{p} is damaged ({_message(exc)})", hint=_EXPORT_HINT) from None
    return conn


def _check_readable_tail(export: NsysExport) -> None:
    """Run SQLite's quick_check on small files so damage shows up at open, not mid-report.

    Big files skip it (it reads every page); their truncation is caught by the
    header check and any later damage by ``NsysExport.rows``.
    """
    if export.path.stat().st_size > QUICK_CHECK_MAX_BYTES:
        return
    try:
        result = export.conn.execute("PRAGMA quick_check(1)").fetchall()
    except SQLITE_ERRORS as exc:
        export.close()
        raise ProfkitError(f"{export.path} is damaged or truncated ({_message(exc)})", hint=_EXPORT_HINT) from None
    if result != [("ok",)]:
        export.close()
        detail = result[0][0] if result else "quick_check failed"
        raise ProfkitError(f"{export.path} is damaged ({detail})", hint=_EXPORT_HINT)


QUICK_CHECK_MAX_BYTES = 64 << 20
