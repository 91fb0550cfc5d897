"""``Trace``: one trace (one process tree, one machine, one rank) as columns.

Readers (``profkit.readers.*``) implement ``TraceSource``; ``Trace`` wraps a
source, loads each table's columns the first time an analysis asks for them
and keeps them.  Analyses take a ``Trace`` and never know the source format.

Loading is per column, not per table, on purpose: ``profkit kernels`` on a
1M-kernel nsys export needs the name and duration of each kernel, not its
grid and registers, and reading two columns out of SQLite is several times
faster than reading fifteen.  The report asks for more columns of the same
table later and gets them added to the ones already loaded; a table is read
once per column, and every section shares what was read.

Row order within a table is the source's (nsys: rowid; Kineto: file order)
and is the same on every load, so columns loaded at different times line up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from profkit.errors import ProfkitError
from profkit.model import schema

NSYS = "nsys"
KINETO = "kineto"


@dataclass
class TraceMeta:
    """What a trace says about itself (never the recorded environment)."""

    source: str                       # NSYS or KINETO
    path: Path
    tool_version: str | None = None   # nsys version, or Kineto's PyTorch version
    schema_version: str | None = None  # nsys export schema, Kineto 'schemaVersion'
    rank: int | None = None           # distributed rank where the trace records it
    world_size: int | None = None
    # How avg/median/stddev are rounded to 0.1 ns in summaries: nsys exports use
    # the rounding of the nsys release that wrote them, so profkit equals that
    # release's `nsys stats` (profkit.readers.nsys.stats.ROUNDING_MODES).
    rounding_mode: str = "decimal-half-up"
    # nvtx_sum names a range of the default domain ":text" from nsys 2024 on.
    nvtx_default_domain_prefix: bool = False
    session_start_utc: str | None = None
    # The capture window (ns, trace clock); None where the source does not say.
    capture_start_ns: int | None = None
    capture_end_ns: int | None = None
    # What was traced ('cuda', 'nvtx', 'osrt', 'cpu_op', ...), for notes like
    # "no NVTX trace: re-run with -t nvtx".
    traced: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


class TraceSource(Protocol):
    """What a reader implements.  ``load`` returns exactly the asked columns
    (names and kinds from ``profkit.model.schema``), rows in a stable order."""

    meta: TraceMeta

    def has(self, table: str) -> bool:
        """Whether the source recorded this kind of data at all."""

    def load(self, table: str, columns: Sequence[str]) -> pd.DataFrame:
        ...

    def close(self) -> None:
        ...


class Trace:
    """A trace as columnar tables.  Use ``profkit.readers.open_trace`` to get one.

    ``trace.table("kernels", ["name", "start", "end"])`` returns those columns;
    ``trace.kernels`` returns every column of the table.  ``native`` is the
    reader's own handle (an ``NsysExport`` for nsys), for the reader-specific
    extras that have no place in the model (nsys's capture metadata).
    """

    def __init__(self, source: TraceSource, native: Any = None) -> None:
        self.source = source
        self.meta: TraceMeta = source.meta
        self.native = native
        self._columns: dict[str, dict[str, Any]] = {}
        self._lengths: dict[str, int] = {}

    # -- tables -------------------------------------------------------------
    def has(self, table: str) -> bool:
        """Whether the trace recorded this table (it may still be empty)."""
        return self.source.has(table)

    def table(self, name: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """Columns of one table as a DataFrame (every column when ``columns`` is None).

        A table the source did not record comes back empty, with the right
        columns, so analyses need no special case for it."""
        if name not in schema.TABLES:
            raise KeyError(f"the trace model has no table {name!r}")
        wanted = list(schema.column_names(name) if columns is None else columns)
        for column in wanted:
            schema.column_kind(name, column)  # raises KeyError on a typo
        cached = self._columns.setdefault(name, {})
        missing = [c for c in wanted if c not in cached]
        if missing:
            frame = self.source.load(name, missing) if self.source.has(name) else empty_table(name, missing)
            n = len(frame)
            if name in self._lengths and self._lengths[name] != n:
                raise ProfkitError(f"{self.meta.path.name}: table {name} changed length between reads "
                                   f"({self._lengths[name]} then {n} rows)")
            self._lengths[name] = n
            for column in missing:
                cached[column] = frame[column].to_numpy() if schema.column_kind(name, column) != schema.CATEGORY \
                    else frame[column].array
        if not wanted:
            return pd.DataFrame(index=pd.RangeIndex(self._lengths.get(name, 0)))
        return pd.DataFrame({c: cached[c] for c in wanted}, copy=False)

    def count(self, name: str) -> int:
        """Rows of a table (loads its first column if nothing was loaded yet)."""
        if name not in self._lengths:
            self.table(name, [schema.column_names(name)[0]])
        return self._lengths[name]

    def forget(self, name: str, columns: Sequence[str] | None = None) -> None:
        """Drop a table's loaded columns, or only ``columns`` of it (to bound memory
        between report sections); a later read loads them again."""
        if columns is None:
            self._columns.pop(name, None)
        else:
            for column in columns:
                self._columns.get(name, {}).pop(column, None)

    @property
    def devices(self) -> pd.DataFrame:
        return self.table("devices")

    @property
    def kernels(self) -> pd.DataFrame:
        return self.table("kernels")

    @property
    def memcpy(self) -> pd.DataFrame:
        return self.table("memcpy")

    @property
    def memset(self) -> pd.DataFrame:
        return self.table("memset")

    @property
    def api(self) -> pd.DataFrame:
        return self.table("api")

    @property
    def ranges(self) -> pd.DataFrame:
        return self.table("ranges")

    @property
    def cpu_ops(self) -> pd.DataFrame:
        return self.table("cpu_ops")

    @property
    def syncs(self) -> pd.DataFrame:
        return self.table("syncs")

    # -- lifetime -------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self.meta.path

    @property
    def name(self) -> str:
        return self.meta.path.name

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Trace({self.meta.source}, {str(self.meta.path)!r})"


def empty_table(name: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """A zero-row frame with the model's columns and kinds."""
    cols = schema.column_names(name) if columns is None else columns
    data: dict[str, Any] = {}
    for c in cols:
        kind = schema.column_kind(name, c)
        if kind == schema.INT:
            data[c] = np.empty(0, dtype=np.int64)
        elif kind == schema.FLOAT:
            data[c] = np.empty(0, dtype=np.float64)
        else:
            data[c] = pd.Categorical([])
    return pd.DataFrame(data)


def from_columns(name: str, columns: dict[str, Any]) -> pd.DataFrame:
    """Build a table from arrays/lists, coercing each column to the model's kind.

    Readers use this so that every source yields the same dtypes; text
    columns become categoricals, integer columns int64 with -1 for missing."""
    data: dict[str, Any] = {}
    for c, values in columns.items():
        kind = schema.column_kind(name, c)
        if kind == schema.CATEGORY:
            data[c] = values if isinstance(values, pd.Categorical) else pd.Categorical(values)
        elif kind == schema.INT:
            arr = np.asarray(values)
            data[c] = arr.astype(np.int64, copy=False) if arr.dtype != object else \
                pd.Series(values).fillna(schema.MISSING_INT).astype(np.int64).to_numpy()
        else:
            data[c] = np.asarray(values, dtype=np.float64)
    return pd.DataFrame(data, copy=False)
