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

``duration`` (``end - start``, int64 ns) may be asked for as a column of any
table with ``start`` and ``end``.  It is not in the schema: a source that
sets ``computes_duration = True`` gets it in ``load`` and computes it itself
(nsys does it in SQL: one narrow column instead of two wide ones is what
keeps ``profkit kernels`` on a 1M-kernel export as fast as one SQL scan);
for any other source ``Trace`` loads ``start`` and ``end`` and subtracts.

Two ways to read columns: ``table()`` gives a pandas DataFrame (text columns
as Categoricals); ``array()`` and ``codes()`` give plain numpy arrays and
never import pandas.  Importing pandas costs ~0.35 s of CPU, more than
``profkit kernels`` on a 1M-kernel export takes without it, so the summaries
read through ``array``/``codes`` and a source may implement ``load_arrays``
(text columns as ``Coded``) to stay pandas-free end to end.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from profkit import allocator
from profkit.errors import ProfkitError
from profkit.model import schema

if TYPE_CHECKING:  # pandas is imported only when a DataFrame is asked for (see Coded)
    import pandas as pd

NSYS = "nsys"
KINETO = "kineto"
# The GPU programming platform a trace records (TraceMeta.gpu_platform), named in headings and
# labels: ROCm's torch.profiler writes HIP calls (hipLaunchKernel) under Kineto's CUDA categories.
CUDA = "CUDA"
HIP = "HIP"

# How nsys rounds avg/median/stddev/percent to one decimal depends on the
# SQLite inside the nsys that runs the report:
# - SQLITE_LEGACY: SQLite before 3.43 (nsys 2023.4 ships 3.42).  round() prints
#   with "%.1f", whose rounder adds 0.05 plus a fudge of x * 3e-16, so a value
#   just below a tie (13065.65 is 13065.6499999999996 as a double) rounds up.
# - DECIMAL_HALF_UP: newer SQLite (nsys 2025.3) rounds the exact binary value
#   half away from zero: 13065.6499999999996 -> 13065.6, 70180.25 -> 70180.3.
# Both are computed exactly (fractions, analysis.kernels.grouped_stats.round_like_nsys), so
# the result does not depend on the SQLite that Python happens to link.  Here, not in
# the statistics, because the nsys reader picks the mode (TraceMeta.rounding_mode).
SQLITE_LEGACY = "sqlite-legacy"
DECIMAL_HALF_UP = "decimal-half-up"
ROUNDING_MODES = (SQLITE_LEGACY, DECIMAL_HALF_UP)


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
    # release's `nsys stats` (ROUNDING_MODES).
    rounding_mode: str = DECIMAL_HALF_UP
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
    gpu_platform: str = CUDA  # CUDA or HIP (AMD ROCm)


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

    # Optional:
    # - ``load_arrays(table, columns) -> dict``: like ``load``, numpy arrays
    #   and ``Coded`` text columns, no pandas;
    # - ``computes_duration: bool``: ``load`` accepts the column "duration";
    # - ``background_source() -> TraceSource``: another source over the same trace with
    #   its own handles (an nsys export: its own SQLite connection), for ``Trace.prefetch``
    #   to load a table on a background thread without sharing the reader's handles;
    # - ``require(table, what)``: raise the source's own ProfkitError for a
    #   table it did not record (naming its table and the option that records it);


DURATION = "duration"


class Coded(NamedTuple):
    """A text column as integer codes into its distinct strings (a Categorical without pandas)."""

    codes: np.ndarray          # int, one per row, indexing ``categories``
    categories: list[str]      # distinct strings


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
        # one lock per table: a background prefetch of one table never blocks reads of another
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._prefetching: list[threading.Thread] = []
        self._pending: set[str] = set()  # tables a background load holds the lock of

    # -- tables -------------------------------------------------------------
    def has(self, table: str) -> bool:
        """Whether the trace recorded this table (it may still be empty)."""
        return self.source.has(table)

    def table(self, name: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """Columns of one table as a DataFrame (every column when ``columns`` is None).

        A table the source did not record comes back empty, with the right
        columns, so analyses need no special case for it."""
        import pandas as pd

        wanted = self._load(name, columns)
        if not wanted:
            return pd.DataFrame(index=pd.RangeIndex(self._lengths.get(name, 0)))
        cached = self._columns[name]
        data = {}
        for c in wanted:
            value = cached[c]
            if isinstance(value, Coded):
                value = cached[c] = _categorical(value)
            data[c] = value
        return pd.DataFrame(data, copy=False)

    def array(self, name: str, column: str) -> np.ndarray:
        """One integer or float column as a numpy array (``duration`` too); no pandas."""
        self._load(name, [column])
        value = self._columns[name][column]
        if isinstance(value, Coded) or not isinstance(value, np.ndarray):
            raise TypeError(f"{name}.{column} is a text column: use codes()")
        return value

    def codes(self, name: str, column: str) -> Coded:
        """One text column as (codes, distinct strings); no pandas."""
        self._load(name, [column])
        value = self._columns[name][column]
        if isinstance(value, Coded):
            return value
        if isinstance(value, np.ndarray):
            raise TypeError(f"{name}.{column} is not a text column: use array()")
        return Coded(np.asarray(value.codes), [str(c) for c in value.categories])

    def prefetch(self, name: str, columns: Sequence[str]) -> bool:
        """Start loading columns on a background thread, where the source can open a
        second handle on the trace (``background_source``); a read of the same table
        waits for it.  SQLite scans release the GIL, so a big table loads while
        analyses of other tables run.  Returns whether a load was started."""
        return self.prefetch_in_order([(name, columns)])

    def prefetch_in_order(self, plan: Sequence[tuple[str, Sequence[str]]]) -> bool:
        """``prefetch`` of several tables, one after the other on one background thread: the
        first one's columns are ready soonest (a scan already uses every core), and a read
        of any of them waits for its own load only.  A table with a load under way, or with
        all these columns cached, is left out.  Returns whether a load was started."""
        opener = getattr(self.source, "background_source", None)
        if opener is None:
            return False
        queued: list[tuple[str, list[str], threading.Lock]] = []
        for name, columns in plan:
            if not self.has(name) or name in self._pending:
                continue
            lock = self._locks[name]
            lock.acquire()  # taken here, so no read of the table can slip in before its load
            wanted = [c for c in columns if c not in self._columns.get(name, {})]
            if not wanted:
                lock.release()
                continue
            self._pending.add(name)
            queued.append((name, wanted, lock))
        if not queued:
            return False

        def load() -> None:
            source = None
            done: set[str] = set()
            try:
                source = opener()
                helper = Trace(source)
                for name, wanted, lock in queued:
                    done.add(name)
                    try:
                        helper._load(name, wanted)
                        n = helper._lengths.get(name)
                        if self._lengths.setdefault(name, n) == n:
                            cached = self._columns.setdefault(name, {})
                            for column, values in helper._columns.pop(name, {}).items():
                                cached.setdefault(column, values)
                    except Exception:  # noqa: BLE001 - the foreground read of the table raises it again, where it belongs
                        pass
                    finally:
                        self._pending.discard(name)
                        lock.release()
                    allocator.give_back()  # the scan's transients (a big table's worth)
            except Exception:  # noqa: BLE001 - no second handle: the foreground reads (and words any error)
                pass
            finally:
                for name, _, lock in queued:
                    if name not in done:  # the second handle failed before this table's turn
                        self._pending.discard(name)
                        lock.release()
                if source is not None:
                    source.close()

        thread = threading.Thread(target=load, name=f"profkit-prefetch-{queued[0][0]}", daemon=True)
        try:
            thread.start()
        except BaseException:
            for name, _, lock in queued:
                self._pending.discard(name)
                lock.release()
            raise
        self._prefetching.append(thread)
        return True

    def _load(self, name: str, columns: Sequence[str] | None) -> list[str]:
        """Make sure the columns are cached; the list of wanted column names."""
        if name not in schema.TABLES:
            raise KeyError(f"the trace model has no table {name!r}")
        wanted = list(schema.column_names(name) if columns is None else columns)
        for column in wanted:
            if column != DURATION:
                schema.column_kind(name, column)  # raises KeyError on a typo
        with self._locks[name]:
            return self._load_locked(name, wanted)

    def _load_locked(self, name: str, wanted: list[str]) -> list[str]:
        cached = self._columns.setdefault(name, {})
        missing = [c for c in wanted if c not in cached]
        # end - start where both are (or are about to be) loaded: one column fewer to read
        both = all(c in cached or c in missing for c in ("start", "end"))
        derive = DURATION in missing and (both or not getattr(self.source, "computes_duration", False))
        if derive:
            missing = [c for c in missing if c != DURATION]
            missing += [c for c in ("start", "end") if c not in cached and c not in missing]
        if missing:
            loaded = self._from_source(name, missing)
            first = next(iter(loaded.values()), None)
            n = 0 if first is None else len(first.codes) if isinstance(first, Coded) else len(first)
            if name in self._lengths and self._lengths[name] != n:
                raise ProfkitError(f"{self.meta.path.name}: table {name} changed length between reads "
                                   f"({self._lengths[name]} then {n} rows)")
            self._lengths[name] = n
            cached.update(loaded)
        if derive:
            cached[DURATION] = cached["end"] - cached["start"]
        return wanted

    def _from_source(self, name: str, columns: list[str]) -> dict[str, Any]:
        """Asked columns as numpy arrays, and Coded or Categorical text columns."""
        if not self.source.has(name):
            return empty_arrays(name, columns)
        load_arrays = getattr(self.source, "load_arrays", None)
        if load_arrays is not None:
            out = dict(load_arrays(name, columns))
        else:
            frame = self.source.load(name, columns)
            out = {}
            for column in columns:
                kind = schema.INT if column == DURATION else schema.column_kind(name, column)
                out[column] = frame[column].to_numpy() if kind != schema.CATEGORY else frame[column].array
        for column in columns:
            if schema.is_narrow(name, column):
                out[column] = narrowed(out[column])
        return out

    def require(self, name: str, what: str) -> None:
        """Raise a one-line ProfkitError when the trace did not record table ``name``
        (``what`` says what it holds, e.g. "CUDA kernel data")."""
        if self.has(name):
            return
        own = getattr(self.source, "require", None)
        if own is not None:
            own(name, what)
        raise ProfkitError(f"{self.name} has no {what}")

    def count(self, name: str) -> int:
        """Rows of a table (loads its first column if nothing was loaded yet)."""
        if name not in self._lengths:
            self.table(name, [schema.column_names(name)[0]])
        return self._lengths[name]

    def forget(self, name: str, columns: Sequence[str] | None = None) -> None:
        """Drop a table's loaded columns, or only ``columns`` of it (to bound memory
        between report sections); a later read loads them again."""
        with self._locks[name]:
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
        for thread in self._prefetching:  # never close the source under a running load
            thread.join()
        self.source.close()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Trace({self.meta.source}, {str(self.meta.path)!r})"


_INT32 = np.iinfo(np.int32)


def narrowed(values: np.ndarray) -> np.ndarray:
    """An integer column as int32 where every value fits (``schema.NARROW``), else unchanged."""
    if values.dtype == np.int32 or values.dtype.kind not in "iu":
        return values
    if len(values) and (int(values.min()) < _INT32.min or int(values.max()) > _INT32.max):
        return values
    return values.astype(np.int32)


def _int_dtype(name: str, column: str) -> type:
    return np.int32 if schema.is_narrow(name, column) else np.int64


def _categorical(coded: Coded) -> Any:
    import pandas as pd

    return pd.Categorical.from_codes(coded.codes, coded.categories, validate=False)


def empty_arrays(name: str, columns: Sequence[str] | None = None) -> dict[str, Any]:
    """Zero-row columns of the model's kinds (text columns as ``Coded``)."""
    out: dict[str, Any] = {}
    for c in schema.column_names(name) if columns is None else columns:
        kind = schema.INT if c == DURATION else schema.column_kind(name, c)
        if kind == schema.CATEGORY:
            out[c] = Coded(np.zeros(0, dtype=np.int64), [])
        else:
            out[c] = np.empty(0, dtype=np.float64 if kind == schema.FLOAT else _int_dtype(name, c))
    return out


def empty_table(name: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """A zero-row frame with the model's columns and kinds."""
    import pandas as pd

    cols = schema.column_names(name) if columns is None else columns
    data: dict[str, Any] = {}
    for c in cols:
        kind = schema.INT if c == DURATION else schema.column_kind(name, c)
        if kind == schema.INT:
            data[c] = np.empty(0, dtype=_int_dtype(name, c))
        elif kind == schema.FLOAT:
            data[c] = np.empty(0, dtype=np.float64)
        else:
            data[c] = pd.Categorical([])
    return pd.DataFrame(data)


def from_columns(name: str, columns: dict[str, Any]) -> pd.DataFrame:
    """Build a table from arrays/lists, coercing each column to the model's kind.

    Readers use this so that every source yields the same dtypes; text
    columns become categoricals, integer columns int64 with -1 for missing."""
    import pandas as pd

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
