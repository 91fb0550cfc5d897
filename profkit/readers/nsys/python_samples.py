"""python_frames from nsys's Python periodic sampling (``--python-sampling=true``).

Each sample is an NVTX event of eventType 34 on the sampled thread, its stack in
an extended payload of schema "Python Periodic Sampling" (``payloads``):
``Thread state``, ``Frames count`` and ``Frames``, innermost first, each
``{Function, File, Line}`` with function and file as ``StringIds`` keys.  The
export keeps the bytes only with ``nsys export --include-blobs=true``.

A sample is an instant; the model's frames are stretches of time (see
``schema.PYTHON_FRAMES``).  Sample i of a thread stands for the time to that
thread's next sample, but never more than twice the thread's median sample
spacing: the sampler runs at a fixed rate (1 kHz by default), so a longer gap is
time in which nothing was sampled (the process stopped, the profiler paused)
and is left to no frame rather than to the last one seen.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np

from profkit.errors import ProfkitError
from profkit.model.keys import rows_by_thread
from profkit.model.trace import Coded, empty_arrays
from profkit.readers.nsys.payloads import (
    ARRAY_FLAGS, ARRAY_LENGTH_INDEX, INTEGER_TYPES, REGISTERED_STRING_HANDLE, PayloadSchemas, read_schemas,
)
from profkit.readers.nsys.reader import GLOBAL_TID_ID_MASK, GLOBAL_TID_PID_SHIFT, NsysExport

SAMPLE_EVENT_TYPE = 34  # ENUM_NSYS_EVENT_TYPE: NvtxPayloadEvent... as nsys 2025.3 writes the samples
SCHEMA_NAME = "Python Periodic Sampling"
# The entries profkit reads, by name: the schema's contract ("Frames count", "Frames" of these).
# A schema without them is one profkit does not know (nsys changed it): one clear error.
FRAME_ENTRIES = ("Function", "File", "Line")
FRAME_TYPES = INTEGER_TYPES | {REGISTERED_STRING_HANDLE}
INT64_MAX = (1 << 63) - 1
HOW = ("capture with nsys profile --python-sampling=true and export with "
       "nsys export --type sqlite --include-blobs=true")
MAX_GAP_SPACINGS = 2


def has_python_sampling(export: NsysExport) -> bool:
    """Whether the export declares nsys's Python sampling schema (its samples may still lack bytes)."""
    if not export.has_table("NVTX_PAYLOAD_SCHEMAS"):
        return False
    return bool(export.scalar("SELECT count(*) FROM NVTX_PAYLOAD_SCHEMAS WHERE name = ?", (SCHEMA_NAME,)))


def python_frames(export: NsysExport) -> dict[str, Any]:
    """The model's python_frames columns (text as ``Coded``) from the export's samples."""
    schemas = read_schemas(export)
    declared = schemas.named(SCHEMA_NAME)
    if not declared:
        raise ProfkitError(f"{export.path.name} has no Python samples", hint=HOW)
    for schema in declared:
        _check(schemas, schema)
    mine = [s for s in declared if (s.domain, s.schema_id) not in schemas.invalid]
    if not mine:
        why = schemas.invalid[(declared[0].domain, declared[0].schema_id)]
        raise ProfkitError(f"{export.path.name}: nsys's {SCHEMA_NAME!r} payload schema cannot be decoded ({why})",
                           hint="a damaged or crafted export")
    domains = sorted({s.domain for s in mine})
    marks = ",".join("?" * len(domains))
    rows = export.rows(f"SELECT start, globalTid, domainId, binaryData FROM NVTX_EVENTS "
                       f"WHERE eventType = {SAMPLE_EVENT_TYPE} AND domainId IN ({marks}) ORDER BY start", domains)
    if not rows:
        raise ProfkitError(f"{export.path.name} declares Python sampling but holds no samples", hint=HOW)
    if all(not isinstance(r[3], bytes) for r in rows):
        raise ProfkitError(f"{export.path.name}: the Python samples' bytes were not exported",
                           hint="export again with nsys export --type sqlite --include-blobs=true REPORT.nsys-rep")
    ids = {(s.domain, s.schema_id) for s in mine}
    samples: dict[int, list[tuple[int, tuple[tuple[int, int, int], ...]]]] = {}
    for start, gtid, domain, blob in rows:
        if blob is None:
            continue
        if not isinstance(start, int) or not isinstance(gtid, int):
            schemas.skip(f"a sample at {start!r} on thread {gtid!r}")
            continue
        for schema, values in schemas.decode_or_skip(blob, domain):
            if (schema.domain, schema.schema_id) in ids:
                stack = tuple((_int64(f["Function"]), _int64(f["File"]), _int64(f["Line"]))
                              for f in reversed(values["Frames"]))
                samples.setdefault(gtid, []).append((start, stack))
    schemas.warn_skipped("Python samples")
    if not samples:
        raise ProfkitError(f"{export.path.name}: none of its Python samples could be decoded"
                           + (f" ({schemas.first_skip})" if schemas.first_skip else ""), hint=HOW)
    return _frames(export, samples)


def _check(schemas: PayloadSchemas, schema: Any) -> None:
    """The schema is nsys's: Frames an array counted by Frames count, of frames whose Function,
    File and Line are integers (string handles and a line number)."""
    names = {e.name: e for e in schema.entries}
    frames, count = names.get("Frames"), names.get("Frames count")
    nested = schemas.schemas.get((schema.domain, frames.type)) if frames is not None else None
    fields = {e.name: e for e in nested.entries} if nested is not None else {}
    if frames is None or count is None or nested is None or any(n not in fields for n in FRAME_ENTRIES):
        problem = f"entries ({', '.join(e.name for e in schema.entries)})"
    elif frames.flags & ARRAY_FLAGS != ARRAY_LENGTH_INDEX or frames.array_detail != count.index:
        problem = f"'Frames' not an array counted by 'Frames count' (flags {frames.flags!r})"
    else:
        odd = [n for n in FRAME_ENTRIES if fields[n].flags or fields[n].type not in FRAME_TYPES]
        problem = f"frame fields {', '.join(map(repr, odd))} not integers" if odd else ""
    if problem:
        raise ProfkitError(f"nsys's {SCHEMA_NAME!r} payload schema has {problem}, a layout profkit does not "
                           "know: an nsys newer than 2025.3?",
                           hint="profkit reads the schema of nsys 2025.3: Frames count, Frames "
                                "(Function, File, Line)")


def _int64(value: int) -> int:
    """A string handle or line number as the int64 column holds it: -1 (unknown) past its range."""
    return value if -INT64_MAX <= value <= INT64_MAX else -1


def _frames(export: NsysExport, samples: dict[int, list[tuple[int, tuple[tuple[int, int, int], ...]]]]
            ) -> dict[str, Any]:
    """Samples per thread -> frame stretches: a frame stays open while consecutive samples
    share it and every frame outside it."""
    cols: dict[str, list[int]] = {k: [] for k in ("start", "end", "gtid", "depth", "function", "file", "line")}
    for gtid, thread in samples.items():
        times = np.array([t for t, _ in thread], dtype=np.int64)
        spacing = np.diff(times)
        cap = int(MAX_GAP_SPACINGS * np.median(spacing)) if len(spacing) else 0
        ends = np.empty(len(times), dtype=np.int64)
        ends[:-1] = times[:-1] + np.minimum(spacing, cap)
        ends[-1] = times[-1] + (int(np.median(spacing)) if len(spacing) else 0)
        open_: list[tuple[int, tuple[int, int, int]]] = []  # (start, frame) per depth
        previous_end = None
        for k, (t, stack) in enumerate(thread):
            contiguous = previous_end is not None and previous_end >= t
            keep = 0
            if contiguous:
                while keep < len(open_) and keep < len(stack) and open_[keep][1] == stack[keep]:
                    keep += 1
            close_at = t if contiguous else previous_end
            for depth in range(len(open_) - 1, keep - 1, -1):
                _emit(cols, open_[depth][0], close_at, gtid, depth, open_[depth][1])
            del open_[keep:]
            open_ += [(t, frame) for frame in stack[keep:]]
            previous_end = int(ends[k])
        for depth in range(len(open_) - 1, -1, -1):
            _emit(cols, open_[depth][0], previous_end, gtid, depth, open_[depth][1])
    if not cols["start"]:
        return empty_arrays("python_frames")
    gtid = np.array(cols["gtid"], dtype=np.int64)
    strings = export.strings(sorted(set(cols["function"]) | set(cols["file"])))
    # nsys stores the sampled names HTML-escaped ("&lt;module&gt;"): shown as Python writes them
    return {
        "start": np.array(cols["start"], dtype=np.int64), "end": np.array(cols["end"], dtype=np.int64),
        "pid": (gtid >> GLOBAL_TID_PID_SHIFT) & GLOBAL_TID_ID_MASK, "tid": gtid & GLOBAL_TID_ID_MASK,
        "depth": np.array(cols["depth"], dtype=np.int64),
        "function": _coded(cols["function"], strings), "file": _coded(cols["file"], strings),
        "line": np.array(cols["line"], dtype=np.int64),
        "call_line": np.ones(len(gtid), dtype=np.int64),  # a sample's line is the one executing
    }


def _emit(cols: dict[str, list[int]], start: int, end: int, gtid: int, depth: int,
          frame: tuple[int, int, int]) -> None:
    if end > start:
        for key, value in zip(("start", "end", "gtid", "depth", "function", "file", "line"),
                              (start, end, gtid, depth, *frame)):
            cols[key].append(value)


def _coded(keys: list[int], strings: dict[int, str]) -> Coded:
    unique, inverse = np.unique(np.array(keys, dtype=np.int64), return_inverse=True)
    labels = [html.unescape(strings.get(int(k), "")) for k in unique.tolist()]
    # Distinct string ids can hold one text: two paths a scrub redacted alike, an escaped and an
    # unescaped name, missing ids.  A category is a text, so they share one code.
    distinct: dict[str, int] = {}
    remap = np.array([distinct.setdefault(label, len(distinct)) for label in labels], dtype=np.int64)
    codes = remap[inverse.reshape(-1)] if len(labels) else np.zeros(0, dtype=np.int64)
    return Coded(codes, list(distinct))


# Frames that are never the user's site: torch's own code (a sync made by ``loss.item()`` or
# ``torch.cuda.synchronize()`` is the caller's) and profkit's (its launcher), as in Kineto's
# python_sites (readers/kineto/stacks.py); nsys names files by absolute path.
_NOT_THE_USERS = ("/site-packages/torch/", "/dist-packages/torch/", "/profkit/")


def _is_user_file(path: str) -> bool:
    return bool(path) and not path.startswith("<") and not any(part in path for part in _NOT_THE_USERS)


def python_sites(frames: dict[str, Any], api: dict[str, Any]) -> dict[str, Any]:
    """One row per API call with a sample taken while it ran (model table ``python_sites``): the
    innermost user frame of the first such sample, at the line it was sampled on.

    Only a sample taken during the call shows its line: a frame row starts at a sample whose
    stack differs from the one before, so the call's user frame is the deepest one whose row
    starts inside the call.  A call shorter than the sample spacing usually has none (a 27 us
    ``.item()`` between 1 kHz samples): the samples around it show the lines before and after
    it, never its own, so it gets no site rather than a neighbour's line."""
    files = frames["file"]
    if not len(frames["start"]) or not len(api["start"]) or not len(files.categories):
        return empty_arrays("python_sites")
    user = np.array([_is_user_file(f) for f in files.categories], dtype=bool)[files.codes]
    f_pid, f_tid, f_depth = frames["pid"][user], frames["tid"][user], frames["depth"][user]
    f_start, f_line = frames["start"][user], frames["line"][user]
    f_file, f_function = files.codes[user], frames["function"].codes[user]
    a_start, a_end = np.asarray(api["start"], dtype=np.int64), np.asarray(api["end"], dtype=np.int64)
    found = np.full(len(a_start), -1, dtype=np.int64)  # the frame row of each call
    calls_of = rows_by_thread(np.asarray(api["pid"], dtype=np.int64), np.asarray(api["tid"], dtype=np.int64))
    for thread, rows in rows_by_thread(np.asarray(f_pid, dtype=np.int64), np.asarray(f_tid, dtype=np.int64)).items():
        calls = calls_of.get(thread)
        if calls is None:
            continue
        for depth in sorted(set(f_depth[rows].tolist()), reverse=True):  # the deepest user frame wins
            open_calls = calls[found[calls] < 0]
            if not len(open_calls):
                break
            at_depth = rows[f_depth[rows] == depth]
            at_depth = at_depth[np.argsort(f_start[at_depth], kind="stable")]
            starts = f_start[at_depth]
            i = np.searchsorted(starts, a_start[open_calls], side="left")  # first row starting in the call
            inside = (i < len(starts)) & (starts[np.minimum(i, len(starts) - 1)] <= a_end[open_calls])
            found[open_calls[inside]] = at_depth[i[inside]]
    calls = np.flatnonzero(found >= 0)
    rows = found[calls]
    labels = [f"{files.categories[f]}:{line}" for f, line in zip(f_file[rows].tolist(), f_line[rows].tolist())]
    unique, inverse = np.unique(np.array(labels, dtype=object), return_inverse=True) if labels else ([], [])
    return {"pid": api["pid"][calls], "tid": api["tid"][calls], "correlation": api["correlation"][calls],
            "start": api["start"][calls], "site": Coded(np.asarray(inverse, dtype=np.int64), list(unique)),
            "function": Coded(f_function[rows], list(frames["function"].categories))}
