"""The one way profkit opens an SQLite file it did not make in this run: an nsys export, a history database.

An SQLite file is a program as much as data: a view runs a query of its
author's choosing whenever its name is read (an endless recursive CTE named
like a table), and a trigger runs one whenever a row is written.  So every
connection profkit opens gets the same guard:

- **tables only**: an authorizer denies every statement that a view or a
  trigger would run (SQLite names the view or trigger behind each access), so
  a view is never read and a trigger never fires, whatever its name;
- **a time budget** per query (``PROFKIT_SQL_SECONDS``) through the progress
  handler, which also ends a query within milliseconds of SIGINT/SIGTERM/SIGHUP
  (``profkit.signals.STOP``): Python's signal handlers wait while SQLite runs in C;
- ``trusted_schema`` off, so the schema's own SQL (defaults, CHECKs, generated
  columns) may call no function that has side effects.

Readers then check the values they read (``typed``): SQLite keeps any type in
any column.
"""

from __future__ import annotations

import sqlite3
import time
import urllib.parse
from pathlib import Path
from typing import Any

from profkit.errors import ProfkitError
from profkit.limits import VARIABLES, LimitExceeded
from profkit.limits import current as current_limits
from profkit.signals import STOP, raise_stop

SQLITE_MAGIC = b"SQLite format 3\x00"
# The progress handler is called every PROGRESS_STEPS virtual-machine steps (~1 ms).
PROGRESS_STEPS = 100_000
# Schema objects that run SQL of the file's author when a table is read or written.
CODE_OBJECTS = ("view", "trigger")


class _Budget:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = time.monotonic()
        self.expired = False

    def __call__(self) -> int:
        if STOP.is_set():
            return 1
        if time.monotonic() - self.started > self.seconds:
            self.expired = True
            return 1
        return 0


class GuardedConnection(sqlite3.Connection):
    """A connection that carries its query budget (``sqlite3.connect(..., factory=GuardedConnection)``)."""

    budget: _Budget | None = None


class _TablesOnly:
    """SQLite's authorizer: deny every access through a view or trigger of the file.  SQLite names
    the view or trigger an access comes from (``source``) and a view when its columns are read
    (``SQLITE_READ``'s table); a CTE of profkit's own queries is named too, so only the file's
    own views and triggers are denied (names are case-insensitive in SQLite)."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def __call__(self, action: int, arg1: str | None, arg2: str | None, db_name: str | None,
                 source: str | None) -> int:
        if source and source.lower() in self.names:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_READ and arg1 and arg1.lower() in self.names:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK


def guard_connection(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the guard: no view or trigger runs, a time budget per query, a stop on signals."""
    budget = _Budget(current_limits().sql_seconds)
    if isinstance(conn, GuardedConnection):
        conn.budget = budget
    conn.set_progress_handler(budget, PROGRESS_STEPS)
    try:
        conn.execute("PRAGMA trusted_schema = OFF")
        names = {name.lower() for _, name in code_objects(conn)}
    except sqlite3.DatabaseError:  # not a database: the caller's first real query says so
        names = set()
    conn.set_authorizer(_TablesOnly(names))


def restart_budget(conn: sqlite3.Connection) -> None:
    budget = getattr(conn, "budget", None)
    if budget is not None:
        budget.started = time.monotonic()
        budget.expired = False


def is_interrupted(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and str(exc) == "interrupted"


def stopped_query(conn: sqlite3.Connection, path: Path) -> ProfkitError:
    """The error for a query the progress handler ended; a signal is raised again."""
    budget = getattr(conn, "budget", None)
    if budget is not None and budget.expired:
        return LimitExceeded(f"{path.name}: a query ran longer than {budget.seconds:g} s",
                             VARIABLES["sql_seconds"])
    raise_stop()
    raise AssertionError("unreachable")


def connect(path: Path, *, read_only: bool) -> GuardedConnection:
    """A guarded connection to ``path``; ``read_only`` opens it immutable (no journal, no lock, no
    file created beside it).  The caller checks what the file holds (``code_objects``)."""
    if read_only:
        target = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"
    else:
        target = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=rwc"
    conn = sqlite3.connect(target, uri=True, check_same_thread=False, factory=GuardedConnection)
    guard_connection(conn)
    return conn


def code_objects(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """``(type, name)`` of every view and trigger in the file (none in a file profkit or nsys wrote)."""
    restart_budget(conn)
    marks = ",".join("?" * len(CODE_OBJECTS))
    rows = conn.execute(f"SELECT type, name FROM sqlite_master WHERE type IN ({marks}) ORDER BY type, name",
                        CODE_OBJECTS).fetchall()
    return [(str(kind), str(name)) for kind, name in rows]


def typed(value: Any, kinds: tuple[type, ...], what: str) -> Any:
    """``value`` when it is one of ``kinds`` (None allowed only when listed as ``type(None)``), else a
    one-line ProfkitError naming ``what``; an int stands for a float (SQLite stores 3.0 as 3)."""
    if isinstance(value, bool):  # never stored by SQLite; a Python caller's mistake
        raise ProfkitError(f"{what} holds {type(value).__name__}, not {_names(kinds)}")
    if isinstance(value, kinds):
        return value
    if float in kinds and isinstance(value, int):
        return float(value)
    raise ProfkitError(f"{what} holds {_kind(value)}, not {_names(kinds)}")


def _kind(value: Any) -> str:
    return {type(None): "NULL", bytes: "a blob", str: "text", int: "an integer", float: "a real"}.get(
        type(value), type(value).__name__)


def _names(kinds: tuple[type, ...]) -> str:
    return " or ".join(_kind(k()) if k is not type(None) else "NULL" for k in kinds)
