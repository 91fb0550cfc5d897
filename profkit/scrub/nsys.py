"""Write a copy of an nsys SQLite export without the profiled process's environment.

nsys records the environment in three places:

- ``TARGET_INFO_SYSTEM_ENV`` row ``DeviceEnvironment``: ``NAME=VALUE;...``;
- ``META_DATA_CAPTURE`` rows ``PROCESS_<n>:ENVIRONMENT_VARIABLE``: ``NAME="VALUE"``;
- ``StringIds`` values holding whole ``environ`` blocks, NUL-separated (nsys
  2025.3 with OS runtime tracing).  SQLite's ``LIKE`` and ``length`` stop at
  the first NUL, so they are found by their bytes (``instr`` on a BLOB cast).

The first two are deleted; the values of every text column of every table
then pass through one ``Redactor`` (environment blocks emptied, secret
values of that environment replaced wherever they occur, credential-shaped
strings, and with ``anonymize`` user and host names and home folders).  The
copy is rebuilt with ``VACUUM INTO``, so no deleted byte survives in free
pages or unused cell space, and the result is checked byte-wise before it
is renamed into place.  The input is only ever opened read-only.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Mapping
from pathlib import Path

from profkit.atomic import atomic_path
from profkit.errors import ProfkitError
from profkit.readers.nsys.reader import (SQLITE_ERRORS, GuardedConnection, guard_connection, is_interrupted,
                                         open_export, restart_budget, stopped_query)
from profkit.scrub.text import Anonymizer, Redactor, parse_environment

SYSTEM_ENV = "TARGET_INFO_SYSTEM_ENV"
CAPTURE = "META_DATA_CAPTURE"
# The capture rows holding environment variables (byte-exact, so a NUL in a name cannot hide one).
_CAPTURE_ENV = "instr(CAST(name AS BLOB), CAST('ENVIRONMENT_VARIABLE' AS BLOB)) > 0"
# Identity fields replaced whole under --anonymize.
_HOST_FIELDS = {(SYSTEM_ENV, "Hostname"), (CAPTURE, "DEVICE_DISPLAY_NAME")}
_USER_FIELD = re.compile(r"PROCESS_[0-9]+:USER_NAME")
# Left in the copy by nothing profkit writes; found by the final byte check.
_ENV_BYTES = re.compile(rb"(?:\x00[A-Za-z_][A-Za-z0-9_]{0,127}=[^\x00]{0,4096}){3}\x00|DeviceEnvironment")


def scrub_export(source: str | os.PathLike[str], output: str | os.PathLike[str], *, anonymize: bool = False,
                 environment: Mapping[str, str] | None = None) -> dict[str, int]:
    """Write a scrubbed copy of ``source`` to ``output``; return what was removed, by kind.

    ``environment``: more variables whose secret values must go (``profkit
    trace`` passes the environment it ran the program with).
    """
    out = Path(output)
    # The working copy still holds every secret: it is made in a private folder of
    # its own (mode 0700, under TMPDIR), never beside the output, which is the folder
    # meant for sharing; only the scrubbed copy is written there, under an
    # ".incomplete" name until it is whole and checked.
    private = Path(tempfile.mkdtemp(prefix="profkit-scrub-"))
    work = private / "unscrubbed.sqlite"
    conn = None
    try:
        with open_export(source) as export:
            try:
                export.conn.execute("VACUUM INTO ?", (str(work),))
            except SQLITE_ERRORS as exc:
                raise export._damage(exc) from None
        conn = sqlite3.connect(work, factory=GuardedConnection)
        guard_connection(conn)
        try:
            removed = _scrub_in_place(conn, anonymize, environment or {})
            conn.commit()
            with atomic_path(out) as tmp:
                restart_budget(conn)
                conn.execute("VACUUM INTO ?", (str(tmp),))
                conn.close()
                _check_clean(tmp, out)
        finally:
            conn.close()
    except SQLITE_ERRORS as exc:
        if is_interrupted(exc):
            raise stopped_query(conn, Path(source)) from None
        # damage that open_export's checks did not reach (big files skip quick_check)
        raise ProfkitError(f"{Path(source).name} is damaged, it cannot be scrubbed ({exc})",
                           hint="export it again: nsys export --type sqlite REPORT.nsys-rep") from None
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return removed


def _scrub_in_place(conn: sqlite3.Connection, anonymize: bool, extra_env: Mapping[str, str]) -> dict[str, int]:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    environments = [dict(extra_env)]
    counts: dict[str, int] = {}
    if SYSTEM_ENV in tables and _has_columns(conn, SYSTEM_ENV, ("name", "value")):
        rows = conn.execute(f"SELECT CAST(value AS BLOB) FROM {SYSTEM_ENV} WHERE name = 'DeviceEnvironment'").fetchall()
        environments += [parse_environment(_text(v), ";") for (v,) in rows]
        counts[f"{SYSTEM_ENV} environment rows"] = conn.execute(
            f"DELETE FROM {SYSTEM_ENV} WHERE name = 'DeviceEnvironment'").rowcount
    if CAPTURE in tables and _has_columns(conn, CAPTURE, ("name", "value")):
        rows = conn.execute(f"SELECT CAST(value AS BLOB) FROM {CAPTURE} WHERE {_CAPTURE_ENV}").fetchall()
        environments.append(parse_environment("\n".join(_text(v) for (v,) in rows), "\n"))
        counts[f"{CAPTURE} environment rows"] = conn.execute(
            f"DELETE FROM {CAPTURE} WHERE {_CAPTURE_ENV}").rowcount
    if "StringIds" in tables and _has_columns(conn, "StringIds", ("value",)):
        for (v,) in conn.execute("SELECT CAST(value AS BLOB) FROM StringIds WHERE instr(CAST(value AS BLOB), x'00') > 0"):
            environments.append(parse_environment(_text(v), "\x00"))
    redact = Redactor.for_environments(environments, anonymize)
    if redact.anonymizer is not None:
        _anonymize_identity_fields(conn, tables, redact.anonymizer)
    for table in sorted(tables):
        if not table.startswith("sqlite_"):
            _redact_table(conn, table, redact)
    if CAPTURE in tables and _has_columns(conn, CAPTURE, ("name", "value")):
        _redact_argument_pairs(conn, redact)
    counts.update(redact.summary())
    return {k: v for k, v in counts.items() if v}


def _anonymize_identity_fields(conn: sqlite3.Connection, tables: set[str], anonymizer: Anonymizer) -> None:
    """Host and user name fields become tokens whole (a host called "vm" is too short to
    replace as a word elsewhere), and the anonymizer learns them for every other string."""
    for table, key in sorted(_HOST_FIELDS):
        if table in tables and _has_columns(conn, table, ("name", "value")):
            for rowid, v in conn.execute(f'SELECT rowid, CAST(value AS BLOB) FROM "{table}" WHERE name = ?', (key,)).fetchall():
                conn.execute(f'UPDATE "{table}" SET value = ? WHERE rowid = ?', (anonymizer.host_token(_text(v)), rowid))
    if CAPTURE in tables and _has_columns(conn, CAPTURE, ("name", "value")):
        for rowid, name, v in conn.execute(f"SELECT rowid, CAST(name AS BLOB), CAST(value AS BLOB) FROM {CAPTURE}").fetchall():
            if _USER_FIELD.fullmatch(_text(name)) and _text(v):
                conn.execute(f"UPDATE {CAPTURE} SET value = ? WHERE rowid = ?", (anonymizer.user_token(_text(v)), rowid))


def _redact_table(conn: sqlite3.Connection, table: str, redact: Redactor) -> None:
    """Pass every text value of ``table`` through ``redact``; write back the ones it changed."""
    columns = [(r[1], (r[2] or "").upper()) for r in conn.execute(f'SELECT * FROM pragma_table_info("{_q(table)}")')]
    # nsys stores text as StringIds keys in its integer columns; but SQLite lets any
    # column hold text, so one scan of the table finds the numeric columns that do
    # (a column scan each, on a million-row kernel table, would dominate).
    text_columns = [name for name, decl in columns if not re.search(r"INT|REAL|FLOA|DOUB", decl)]
    numeric = [name for name, _ in columns if name not in text_columns]
    if numeric:
        probe = ", ".join(f'max(typeof("{_q(c)}") IN (\'text\', \'blob\'))' for c in numeric)
        found = conn.execute(f'SELECT {probe} FROM "{_q(table)}"').fetchone() or ()
        text_columns += [c for c, hit in zip(numeric, found) if hit]
    # Rows are addressed by rowid, unless the table has none (WITHOUT ROWID, or
    # a column shadowing the name): then by the old value, which is exact too.
    by_rowid = _has_rowid(conn, table) and not {"rowid", "_rowid_", "oid"} & {c.lower() for c, _ in columns}
    for column in text_columns:
        col, tab = _q(column), _q(table)
        key = "rowid" if by_rowid else f'CAST("{col}" AS BLOB)'
        changes = []
        for where_value, raw in conn.execute(
                f'SELECT {key}, CAST("{col}" AS BLOB) FROM "{tab}" WHERE typeof("{col}") IN (\'text\', \'blob\')'):
            text = _text(raw)
            cleaned = redact(text)
            if cleaned != text:
                value = cleaned.encode("utf-8", "surrogateescape")
                changes.append((value, value, where_value))
        # CAST(? AS TEXT) stores the bytes as they are (a value may not be valid
        # UTF-8); a BLOB stays a BLOB.  Plain `?` marks: Python 3.14's sqlite3 refuses
        # numbered ones (?1) bound from a sequence.
        conn.executemany(f'UPDATE "{tab}" SET "{col}" = CASE typeof("{col}") WHEN \'blob\' THEN ? '
                         f'ELSE CAST(? AS TEXT) END WHERE {key} = ?', changes)


def _redact_argument_pairs(conn: sqlite3.Connection, redact: Redactor) -> None:
    """``--password VALUE`` on a command line is two META_DATA_CAPTURE rows
    (PROCESS_0:ARGUMENT_3, _4): the second's value goes when the first is a secret option."""
    rows = conn.execute(f"SELECT rowid, CAST(name AS BLOB), CAST(value AS BLOB) FROM {CAPTURE} "
                        "WHERE name GLOB 'PROCESS_*:ARGUMENT_*'").fetchall()
    arguments = {}
    for rowid, name, value in rows:
        process, _, index = _text(name).rpartition(":ARGUMENT_")
        if index.isdigit():
            arguments[process, int(index)] = (rowid, _text(value))
    for (process, index), (_, option) in sorted(arguments.items()):
        following = arguments.get((process, index + 1))
        if following is not None:
            cleaned = redact.redact_pair(option, following[1])
            if cleaned != following[1]:
                conn.execute(f"UPDATE {CAPTURE} SET value = ? WHERE rowid = ?", (cleaned, following[0]))


def _check_clean(path: Path, out: Path) -> None:
    """Refuse to hand over a copy that still holds an environment block."""
    with open(path, "rb") as fh:
        tail = b""
        while chunk := fh.read(1 << 22):
            block = tail + chunk
            if _ENV_BYTES.search(block):
                raise ProfkitError(f"scrubbing left an environment block in {out.name}; nothing was written",
                                   hint="please report it with the nsys version that made the file")
            tail = block[-8192:]


def _has_columns(conn: sqlite3.Connection, table: str, columns: tuple[str, ...]) -> bool:
    present = {r[1] for r in conn.execute(f'SELECT * FROM pragma_table_info("{_q(table)}")')}
    return set(columns) <= present


def _has_rowid(conn: sqlite3.Connection, table: str) -> bool:
    try:
        conn.execute(f'SELECT rowid FROM "{_q(table)}" LIMIT 0')
        return True
    except sqlite3.OperationalError:
        return False


def _text(raw: bytes | str | None) -> str:
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    return raw.decode("utf-8", "surrogateescape")


def _q(name: str) -> str:
    return name.replace('"', '""')
