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
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

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


def _us(ns: np.ndarray) -> tuple[list[int], list[int]]:
    whole, frac = np.divmod(np.asarray(ns, dtype=np.int64), 1000)
    return whole.tolist(), frac.tolist()


def _chunks(n: int) -> Iterator[slice]:
    for lo in range(0, n, CHUNK_ROWS):
        yield slice(lo, min(n, lo + CHUNK_ROWS))


def kernel_events(k: pd.DataFrame, pid: np.ndarray) -> Iterator[Lines]:
    """Kernels on their GPU track (``pid`` per row, ``tid`` = stream)."""
    code, names = json_names(k["name"])
    static, dynamic = k["static_smem_bytes"].to_numpy(), k["dynamic_smem_bytes"].to_numpy()
    smem = np.where((static >= 0) & (dynamic >= 0), static + dynamic, -1)
    for part in _chunks(len(k)):
        ts, tsf = _us(k["start"].to_numpy()[part])
        du, duf = _us(k["end"].to_numpy()[part] - k["start"].to_numpy()[part])
        cols = [k[c].to_numpy()[part].tolist() for c in (
            "device", "stream", "correlation", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
            "registers_per_thread", "static_smem_bytes", "dynamic_smem_bytes")]
        yield [
            f'{{"ph":"X","cat":"kernel","name":{names[c]},"pid":{p},"tid":{st},"ts":{a}.{b:03d},'
            f'"dur":{d}.{e:03d},"args":{{"device":{dev},"stream":{st},"correlation":{co},'
            f'"grid":[{gx},{gy},{gz}],"block":[{bx},{by},{bz}],"registers per thread":{rg},'
            f'"shared memory":{sm},"static shared memory":{ss},"dynamic shared memory":{ds}}}}}'
            for c, p, a, b, d, e, dev, st, co, gx, gy, gz, bx, by, bz, rg, ss, ds, sm in zip(
                code[part].tolist(), pid[part].tolist(), ts, tsf, du, duf, *cols, smem[part].tolist())
        ]


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
    for part in _chunks(len(m)):
        ts, tsf = _us(m["start"].to_numpy()[part])
        du, duf = _us(m["end"].to_numpy()[part] - m["start"].to_numpy()[part])
        cols = [m[c].to_numpy()[part].tolist() for c in ("device", "stream", "correlation", "bytes")]
        yield [
            f'{{"ph":"X","cat":"{what}","name":{names[c]},"pid":{p},"tid":{st},"ts":{a}.{b:03d},'
            f'"dur":{d}.{e:03d},"args":{{"device":{dev},"stream":{st},"correlation":{co},"bytes":{nb}}}}}'
            for c, p, a, b, d, e, dev, st, co, nb in zip(code[part].tolist(), pid[part].tolist(), ts, tsf, du, duf,
                                                          *cols)
        ]


def api_events(a: pd.DataFrame) -> Iterator[Lines]:
    """CUDA runtime/driver calls on the calling thread."""
    code, names = json_names(a["name"])
    layer = pd.Categorical(a["layer"])
    cats = ['"cuda_driver"' if str(c) == "driver" else '"cuda_runtime"' for c in layer.categories] + ['"cuda_runtime"']
    layer_code = np.where(layer.codes < 0, len(cats) - 1, layer.codes)
    for part in _chunks(len(a)):
        ts, tsf = _us(a["start"].to_numpy()[part])
        du, duf = _us(a["end"].to_numpy()[part] - a["start"].to_numpy()[part])
        yield [
            f'{{"ph":"X","cat":{cats[lc]},"name":{names[c]},"pid":{p},"tid":{t},"ts":{s}.{sf:03d},'
            f'"dur":{d}.{df:03d},"args":{{"correlation":{co}}}}}'
            for c, lc, p, t, s, sf, d, df, co in zip(
                code[part].tolist(), layer_code[part].tolist(), a["pid"].to_numpy()[part].tolist(),
                a["tid"].to_numpy()[part].tolist(), ts, tsf, du, duf, a["correlation"].to_numpy()[part].tolist())
        ]


def slice_events(frame: pd.DataFrame, cat: np.ndarray, cats: list[str], names: tuple[np.ndarray, list[str]],
                 args: list[str]) -> Iterator[Lines]:
    """Generic complete events: ``frame`` has pid, tid, start, end; ``cat`` indexes ``cats``
    (JSON strings); ``args`` is one serialised args object per row."""
    code, table = names
    for part in _chunks(len(frame)):
        ts, tsf = _us(frame["start"].to_numpy()[part])
        du, duf = _us(frame["end"].to_numpy()[part] - frame["start"].to_numpy()[part])
        yield [
            f'{{"ph":"X","cat":{cats[k]},"name":{table[c]},"pid":{p},"tid":{t},"ts":{s}.{sf:03d},'
            f'"dur":{d}.{df:03d},"args":{g}}}'
            for k, c, p, t, s, sf, d, df, g in zip(
                cat[part].tolist(), code[part].tolist(), frame["pid"].to_numpy()[part].tolist(),
                frame["tid"].to_numpy()[part].tolist(), ts, tsf, du, duf, args[part])
        ]


def flow_events(ids: np.ndarray, src_pid: np.ndarray, src_tid: np.ndarray, src_ts: np.ndarray,
                dst_pid: np.ndarray, dst_tid: np.ndarray, dst_ts: np.ndarray) -> Iterator[Lines]:
    """Launch -> GPU operation arrows: an ``s`` inside the API slice, an ``f`` bound to the
    GPU slice that encloses its timestamp (the operation's start)."""
    for part in _chunks(len(ids)):
        a, af = _us(src_ts[part])
        b, bf = _us(dst_ts[part])
        lines: Lines = []
        for i, sp, st, s1, s2, dp, dt, d1, d2 in zip(
                ids[part].tolist(), src_pid[part].tolist(), src_tid[part].tolist(), a, af,
                dst_pid[part].tolist(), dst_tid[part].tolist(), b, bf):
            lines.append(f'{{"ph":"s","id":{i},"pid":{sp},"tid":{st},"ts":{s1}.{s2:03d},'
                         f'"cat":"ac2g","name":"ac2g"}}')
            lines.append(f'{{"ph":"f","id":{i},"pid":{dp},"tid":{dt},"ts":{d1}.{d2:03d},'
                         f'"cat":"ac2g","name":"ac2g","bp":"e"}}')
        yield lines


def counter_events(name: str, pid: int, ts_ns: np.ndarray, values: np.ndarray, key: str) -> Lines:
    """One counter track (``ph: "C"``): a sample per timestamp."""
    ts, tsf = _us(ts_ns)
    jname, jkey = json_text(name), json_text(key)
    return [f'{{"ph":"C","name":{jname},"pid":{pid},"tid":0,"ts":{a}.{b:03d},"args":{{{jkey}:{v}}}}}'
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
