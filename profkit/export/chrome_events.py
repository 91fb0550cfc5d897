"""Rows of the trace model -> lines of Chrome trace-event JSON, a chunk at a time.

Each function takes columns (numpy arrays / categoricals) and yields lists of
already-serialised JSON objects (``str``), ``CHUNK_ROWS`` rows at a time, so
a million kernels never become a million dicts or one giant string.  Names
are serialised once per distinct string (the columns are categoricals) and
looked up by code; times are written the way Kineto writes them, integer
microseconds and three decimals (``"ts":1234.567``): exact to the
nanosecond, and ``round(ts * 1000)`` on read gives back the same integer.

Shapes follow Kineto's output (libkineto ``output_json.cpp``) so that a
Kineto reader (profkit's, HTA's, TensorBoard's) reads an export as it reads
a torch.profiler trace: kernels are ``cat: "kernel"`` on ``pid`` = device,
``tid`` = stream, with ``args`` device/stream/correlation/grid/block/
"registers per thread"/"shared memory"; CUDA calls are ``cuda_runtime`` /
``cuda_driver`` on the calling thread; launch -> kernel arrows are flow
events ``s``/``f`` of ``cat: "ac2g"``, the ``f`` bound to the enclosing
slice (``"bp": "e"``), which Chrome's viewer, Perfetto and HTA all pair.
(Perfetto also reads the newer flow form, ``bind_id``/``flow_in``/``flow_out``
on the slices themselves, but chrome://tracing and HTA do not.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import orjson
import pandas as pd

CHUNK_ROWS = 50_000

Lines = list[str]


def clean_text(text: object) -> str:
    """A name as it may appear in an export.

    nsys keeps the profiled process's environment as NUL-separated
    ``NAME=VALUE`` blocks among its strings; a name is never allowed to carry
    one into an export: everything from the first NUL on is dropped."""
    value = "" if text is None or (isinstance(text, float) and text != text) else str(text)
    return value.split("\x00", 1)[0]


def json_text(text: object) -> str:
    return orjson.dumps(clean_text(text)).decode()


def json_names(column: pd.Categorical | pd.Series | Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """(index per row, JSON string per distinct value): each distinct name serialised once."""
    cat = pd.Categorical(column) if not isinstance(column, pd.Categorical) else column
    table = [json_text(c) for c in cat.categories] + ['""']
    codes = np.asarray(cat.codes, dtype=np.int64)
    return np.where(codes < 0, len(table) - 1, codes), table


# "000" .. "999", taken by index (numpy, no Python loop): formatting {:03d} per row costs twice the time.
FRACTIONS = np.array([f"{i:03d}" for i in range(1000)], dtype=object)


def _us(ns: np.ndarray) -> tuple[list[int], list[str]]:
    """Whole microseconds and the three decimals (as text) of each ns value."""
    whole, frac = np.divmod(np.asarray(ns, dtype=np.int64), 1000)
    return whole.tolist(), FRACTIONS[frac].tolist()


def _chunks(n: int) -> Iterator[slice]:
    for lo in range(0, n, CHUNK_ROWS):
        yield slice(lo, min(n, lo + CHUNK_ROWS))


def combinations(columns: dict[str, np.ndarray]) -> tuple[np.ndarray, pd.DataFrame]:
    """(group per row, one row per distinct combination of the columns).

    Everything of an event that repeats (name, track, launch shape) is
    serialised once per combination, so a row costs only its times and ids."""
    frame = pd.DataFrame(columns, copy=False)
    if frame.empty:
        return np.empty(0, dtype=np.int64), frame
    group = frame.groupby(list(columns), sort=False, observed=True).ngroup().to_numpy()
    _, first = np.unique(group, return_index=True)
    return group, frame.iloc[first].reset_index(drop=True)


def kernel_events(k: pd.DataFrame, pid: np.ndarray) -> Iterator[Lines]:
    """Kernels on their GPU track (``pid`` per row, ``tid`` = stream)."""
    code, names = json_names(k["name"])
    shape = ("device", "stream", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
             "registers_per_thread", "static_smem_bytes", "dynamic_smem_bytes")
    group, combos = combinations({"name": code, "pid": pid, **{c: k[c].to_numpy() for c in shape}})
    heads, tails = [], []
    for r in combos.itertuples(index=False):
        smem = r.static_smem_bytes + r.dynamic_smem_bytes if min(r.static_smem_bytes, r.dynamic_smem_bytes) >= 0 else -1
        heads.append(f'{{"ph":"X","cat":"kernel","name":{names[r.name]},"pid":{r.pid},"tid":{r.stream},"ts":')
        tails.append(f'"device":{r.device},"stream":{r.stream},"grid":[{r.grid_x},{r.grid_y},{r.grid_z}],'
                     f'"block":[{r.block_x},{r.block_y},{r.block_z}],"registers per thread":{r.registers_per_thread},'
                     f'"shared memory":{smem}}}}}')
    start, end, corr = k["start"].to_numpy(), k["end"].to_numpy(), k["correlation"].to_numpy()
    for part in _chunks(len(k)):
        ts, tsf = _us(start[part])
        du, duf = _us(end[part] - start[part])
        yield [f'{heads[g]}{a}.{b},"dur":{d}.{e},"args":{{"correlation":{co},{tails[g]}'
               for g, a, b, d, e, co in zip(group[part].tolist(), ts, tsf, du, duf, corr[part].tolist())]


def graph_events(g: pd.DataFrame, pid: np.ndarray) -> Iterator[Lines]:
    """CUDA graph replays whose kernels were not traced, on their GPU track (``cat: "cuda_graph"``:
    Kineto has no such events; profkit's Kineto reader reads them back as graph replays)."""
    code, names = json_names(g["name"])
    group, combos = combinations({"name": code, "pid": pid, "device": g["device"].to_numpy(),
                                  "stream": g["stream"].to_numpy(), "graph": g["graph_id"].to_numpy()})
    heads = [f'{{"ph":"X","cat":"cuda_graph","name":{names[r.name]},"pid":{r.pid},"tid":{r.stream},"ts":'
             for r in combos.itertuples(index=False)]
    tails = [f'"device":{r.device},"stream":{r.stream},"graph id":{r.graph}' for r in combos.itertuples(index=False)]
    start, end, corr = g["start"].to_numpy(), g["end"].to_numpy(), g["correlation"].to_numpy()
    for part in _chunks(len(g)):
        ts, tsf = _us(start[part])
        du, duf = _us(end[part] - start[part])
        yield [f'{heads[k]}{a}.{b},"dur":{d}.{e},"args":{{{tails[k]},"correlation":{co}}}}}'
               for k, a, b, d, e, co in zip(group[part].tolist(), ts, tsf, du, duf, corr[part].tolist())]


# nsys copy kinds -> Kineto's short labels ("Memcpy HtoD (Pageable -> Device)")
COPY_LABELS = {"Host-to-Device": "HtoD", "Device-to-Host": "DtoH", "Device-to-Device": "DtoD",
               "Host-to-Host": "HtoH", "Peer-to-Peer": "PtoP", "Device-to-Peer": "DtoP"}


def memcpy_names(m: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Kineto-style memcpy names, built once per (kind, src, dst) combination."""
    parts = [pd.Categorical(m[c]) for c in ("copy_kind", "src_kind", "dst_kind")]
    codes = np.stack([np.asarray(p.codes, dtype=np.int64) for p in parts], axis=1).reshape(-1, 3)
    combos, code = np.unique(codes, axis=0, return_inverse=True)
    names = []
    for combo in combos.tolist():
        kind, src, dst = (clean_text(p.categories[v]) if v >= 0 else "" for p, v in zip(parts, combo))
        label = f"Memcpy {COPY_LABELS.get(kind, kind)}".rstrip()
        if src or dst:
            label += f" ({src or '?'} -> {dst or '?'})"
        names.append(json_text(label))
    return np.asarray(code, dtype=np.int64).reshape(-1), names


def memset_names(m: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Kineto-style memset names, "Memset (Device)", one per memory kind."""
    dst = pd.Categorical(m["dst_kind"])
    table = [json_text(f"Memset ({clean_text(c) or '?'})") for c in dst.categories] + ['"Memset"']
    codes = np.asarray(dst.codes, dtype=np.int64)
    return np.where(codes < 0, len(table) - 1, codes), table


def memory_events(m: pd.DataFrame, pid: np.ndarray, what: str) -> Iterator[Lines]:
    """memcpy (``what="gpu_memcpy"``) or memset (``"gpu_memset"``) on their GPU track."""
    code, names = memcpy_names(m) if what == "gpu_memcpy" else memset_names(m)
    group, combos = combinations({"name": code, "pid": pid, "device": m["device"].to_numpy(),
                                  "stream": m["stream"].to_numpy()})
    heads = [f'{{"ph":"X","cat":"{what}","name":{names[r.name]},"pid":{r.pid},"tid":{r.stream},"ts":'
             for r in combos.itertuples(index=False)]
    tails = [f'"device":{r.device},"stream":{r.stream}' for r in combos.itertuples(index=False)]
    start, end = m["start"].to_numpy(), m["end"].to_numpy()
    corr = m["correlation"].to_numpy()
    # -1: the trace gave no size (ROCm's Kineto copies); null, never a size of -1 bytes
    nbytes = ["null" if b < 0 else b for b in m["bytes"].to_numpy().tolist()]
    for part in _chunks(len(m)):
        ts, tsf = _us(start[part])
        du, duf = _us(end[part] - start[part])
        yield [f'{heads[g]}{a}.{b},"dur":{d}.{e},"args":{{{tails[g]},"correlation":{co},"bytes":{nb}}}}}'
               for g, a, b, d, e, co, nb in zip(group[part].tolist(), ts, tsf, du, duf, corr[part].tolist(),
                                                nbytes[part])]


def api_events(a: pd.DataFrame) -> Iterator[Lines]:
    """CUDA runtime/driver calls on the calling thread."""
    code, names = json_names(a["name"])
    layer = pd.Categorical(a["layer"])
    group, combos = combinations({"name": code, "layer": np.asarray(layer.codes, np.int64),
                                  "pid": a["pid"].to_numpy(), "tid": a["tid"].to_numpy()})
    heads = []
    for r in combos.itertuples(index=False):
        driver = r.layer >= 0 and str(layer.categories[r.layer]) == "driver"
        cat = "cuda_driver" if driver else "cuda_runtime"
        heads.append(f'{{"ph":"X","cat":"{cat}","name":{names[r.name]},"pid":{r.pid},"tid":{r.tid},"ts":')
    start, end, corr = a["start"].to_numpy(), a["end"].to_numpy(), a["correlation"].to_numpy()
    for part in _chunks(len(a)):
        ts, tsf = _us(start[part])
        du, duf = _us(end[part] - start[part])
        yield [f'{heads[g]}{s}.{sf},"dur":{d}.{df},"args":{{"correlation":{co}}}}}'
               for g, s, sf, d, df, co in zip(group[part].tolist(), ts, tsf, du, duf, corr[part].tolist())]


def slice_events(frame: pd.DataFrame, cat: np.ndarray, cats: list[str], names: tuple[np.ndarray, list[str]],
                 args: Callable[[slice], list[str]]) -> Iterator[Lines]:
    """Generic complete events: ``frame`` has pid, tid, start, end; ``cat`` indexes ``cats``
    (JSON strings); ``args(rows)`` serialises the args objects of a slice of rows."""
    code, table = names
    start, end = frame["start"].to_numpy(), frame["end"].to_numpy()
    pid, tid = frame["pid"].to_numpy(), frame["tid"].to_numpy()
    for part in _chunks(len(frame)):
        ts, tsf = _us(start[part])
        du, duf = _us(end[part] - start[part])
        yield [
            f'{{"ph":"X","cat":{cats[k]},"name":{table[c]},"pid":{p},"tid":{t},"ts":{s}.{sf},'
            f'"dur":{d}.{df},"args":{g}}}'
            for k, c, p, t, s, sf, d, df, g in zip(
                cat[part].tolist(), code[part].tolist(), pid[part].tolist(), tid[part].tolist(), ts, tsf, du, duf,
                args(part))
        ]


def flow_events(ids: np.ndarray, src_pid: np.ndarray, src_tid: np.ndarray, src_ts: np.ndarray,
                dst_pid: np.ndarray, dst_tid: np.ndarray, dst_ts: np.ndarray) -> Iterator[Lines]:
    """Launch -> GPU operation arrows: an ``s`` inside the API slice, an ``f`` bound to the
    GPU slice that encloses its timestamp (the operation's start)."""
    src, src_tracks = combinations({"pid": src_pid, "tid": src_tid})
    dst, dst_tracks = combinations({"pid": dst_pid, "tid": dst_tid})
    starts = [f',"pid":{r.pid},"tid":{r.tid},"cat":"ac2g","name":"ac2g","ts":' for r in src_tracks.itertuples()]
    ends = [f',"pid":{r.pid},"tid":{r.tid},"cat":"ac2g","name":"ac2g","bp":"e","ts":'
            for r in dst_tracks.itertuples()]
    for part in _chunks(len(ids)):
        a, af = _us(src_ts[part])
        b, bf = _us(dst_ts[part])
        fid = ids[part].tolist()
        yield [f'{{"ph":"s","id":{i}{starts[s]}{s1}.{s2}}}' for i, s, s1, s2 in zip(fid, src[part].tolist(), a, af)]
        yield [f'{{"ph":"f","id":{i}{ends[d]}{d1}.{d2}}}' for i, d, d1, d2 in zip(fid, dst[part].tolist(), b, bf)]


def counter_events(name: str, pid: int, ts_ns: np.ndarray, values: np.ndarray, key: str) -> Lines:
    """One counter track (``ph: "C"``): a sample per timestamp."""
    ts, tsf = _us(ts_ns)
    jname, jkey = json_text(name), json_text(key)
    return [f'{{"ph":"C","name":{jname},"pid":{pid},"tid":0,"ts":{a}.{b},"args":{{{jkey}:{v}}}}}'
            for a, b, v in zip(ts, tsf, np.round(values, 2).tolist())]


def instant_event(name: str, cat: str, pid: int, tid: int, ts_ns: int, args: dict) -> str:
    a, b = divmod(int(ts_ns), 1000)
    return (f'{{"ph":"i","s":"t","cat":{json_text(cat)},"name":{json_text(name)},"pid":{pid},"tid":{tid},'
            f'"ts":{a}.{b:03d},"args":{orjson.dumps(args).decode()}}}')


def metadata_event(kind: str, pid: int, tid: int | None, value: str | int) -> str:
    """``process_name``/``thread_name`` (``name`` arg) or ``*_sort_index`` (``sort_index`` arg)."""
    key = "sort_index" if kind.endswith("sort_index") else "name"
    arg = json_text(value) if key == "name" else int(value)
    return f'{{"ph":"M","name":"{kind}","pid":{pid},"tid":{0 if tid is None else tid},"args":{{"{key}":{arg}}}}}'
