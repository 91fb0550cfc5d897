"""Hostile inputs of issue 34 (payloads, NCCL, rank splitting, Kineto stacks), built from real exports.

Nothing here is committed as a file: each builder copies a real capture and
changes a few rows or bytes of it, the shape an adversarial review used.  Bases:
- ``PYTHON_SAMPLES``: nsys 2025.3 with ``--python-sampling=true`` and
  ``--include-blobs=true`` (16,662 sample blobs; schema "Python Periodic
  Sampling", frames of schema 4294967296 in domain 1);
- ``WHOLE_JOB``: a two-rank torchrun job in one export, NCCL 2.28 init and
  collective payloads (schemas 16777218 init, 16777221.. collectives);
- ``KINETO_STACKS``: a torch.profiler trace recorded ``with_stack=True``.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import DATA, _decompressed

PYTHON_SAMPLES = DATA / "host" / "nsys" / "llama_train_nsys.sqlite.xz"
WHOLE_JOB = DATA / "ddp" / "whole2" / "whole.sqlite.xz"
KINETO_STACKS = DATA / "host" / "kineto" / "llama_train_kineto.json.gz"
SAMPLING = "Python Periodic Sampling"
U64_MAX = (1 << 64) - 1


def copy(base: Path, dest: Path) -> Path:
    shutil.copyfile(_decompressed(base), dest)
    return dest


def _edit(base: Path, dest: Path, change: Callable[[sqlite3.Connection], None]) -> Path:
    copy(base, dest)
    conn = sqlite3.connect(dest)
    with conn:
        change(conn)
    conn.close()
    return dest


def _sampling_ids(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """(domain, sampling schema id, frame schema id) of the export's Python sampler."""
    domain, outer = conn.execute("SELECT domainId, schemaId FROM NVTX_PAYLOAD_SCHEMAS WHERE name = ?",
                                 (SAMPLING,)).fetchone()
    frame = conn.execute("SELECT type FROM NVTX_PAYLOAD_SCHEMA_ENTRIES WHERE domainId = ? AND schemaId = ? "
                         "AND name = 'Frames'", (domain, outer)).fetchone()[0]
    return domain, outer, frame


def _entry(conn: sqlite3.Connection, schema: int, name: str, **values: Any) -> None:
    sets = ", ".join(f'"{k}" = ?' for k in values)
    conn.execute(f"UPDATE NVTX_PAYLOAD_SCHEMA_ENTRIES SET {sets} WHERE schemaId = ? AND name = ?",
                 (*values.values(), schema, name))


def _rewrite_blobs(conn: sqlite3.Connection, where: str, patch: Callable[[bytearray], None]) -> None:
    """``patch`` each blob of the NVTX events ``where`` selects, in place."""
    for rowid, blob in conn.execute(f"SELECT rowid, binaryData FROM NVTX_EVENTS WHERE {where}").fetchall():
        data = bytearray(blob)
        patch(data)
        conn.execute("UPDATE NVTX_EVENTS SET binaryData = ? WHERE rowid = ?", (bytes(data), rowid))


def _first_payload(data: bytearray) -> int:
    """Byte offset of a blob's first payload (the blob: count, then (schema, size, offset) each)."""
    return struct.unpack_from("<Q", data, 8 + 16)[0]


# -- nsys Python samples: what `profkit host` decodes ---------------------------------------------
def samples_count_past_blob(dest_dir: Path, every: bool = True) -> Path:
    """``every``: Frames counted by the 8-byte "Thread state ID", 2**62 in every sample, of frames
    whose payloadSize is -1 (the decoder looped without reading).  Else only the first sample
    is broken: its "Frames count" is 2**32 - 1, past its blob; the others still decode."""
    def change(conn: sqlite3.Connection) -> None:
        _, outer, frame = _sampling_ids(conn)
        first = conn.execute("SELECT min(rowid) FROM NVTX_EVENTS WHERE eventType = 34 AND "
                             "binaryData IS NOT NULL").fetchone()[0]
        if every:
            _entry(conn, outer, "Frames", arrayOrUnionDetail=0)
            conn.execute("UPDATE NVTX_PAYLOAD_SCHEMAS SET payloadSize = -1 WHERE schemaId = ?", (frame,))
            _rewrite_blobs(conn, "eventType = 34 AND binaryData IS NOT NULL",
                           lambda d: struct.pack_into("<Q", d, _first_payload(d), 1 << 62))
        else:
            _rewrite_blobs(conn, f"rowid = {first}",
                           lambda d: struct.pack_into("<I", d, _first_payload(d) + 12, (1 << 32) - 1))
    return _edit(PYTHON_SAMPLES, dest_dir / f"hostile_count_past_blob_{'all' if every else 'one'}.sqlite", change)


def samples_self_reference(dest_dir: Path) -> Path:
    """The frame schema's "Line" is of the frame schema itself, and "Frames" of the sampling schema."""
    def change(conn: sqlite3.Connection) -> None:
        _, outer, frame = _sampling_ids(conn)
        _entry(conn, frame, "Line", type=frame)
        _entry(conn, outer, "Frames", type=outer)
    return _edit(PYTHON_SAMPLES, dest_dir / "hostile_self_reference.sqlite", change)


def samples_bad_rows(dest_dir: Path) -> Path:
    """Three samples broken, the rest intact: a text binaryData, a NULL one, a NULL globalTid."""
    def change(conn: sqlite3.Connection) -> None:
        rows = [r[0] for r in conn.execute("SELECT rowid FROM NVTX_EVENTS WHERE eventType = 34 AND "
                                           "binaryData IS NOT NULL ORDER BY start LIMIT 3")]
        conn.execute("UPDATE NVTX_EVENTS SET binaryData = 'abc' WHERE rowid = ?", (rows[0],))
        conn.execute("UPDATE NVTX_EVENTS SET binaryData = NULL WHERE rowid = ?", (rows[1],))
        conn.execute("UPDATE NVTX_EVENTS SET globalTid = NULL WHERE rowid = ?", (rows[2],))
    return _edit(PYTHON_SAMPLES, dest_dir / "hostile_bad_rows.sqlite", change)


def samples_huge_string_handle(dest_dir: Path) -> Path:
    """Every sample's innermost frame names its function by string handle 2**64 - 1."""
    def change(conn: sqlite3.Connection) -> None:
        _rewrite_blobs(conn, "eventType = 34 AND binaryData IS NOT NULL",
                       lambda d: struct.pack_into("<Q", d, _first_payload(d) + 16, U64_MAX)
                       if struct.unpack_from("<I", d, _first_payload(d) + 12)[0] else None)
    return _edit(PYTHON_SAMPLES, dest_dir / "hostile_string_handle.sqlite", change)


def samples_schema_edit(dest_dir: Path, tag: str) -> Path:
    """One schema cell changed: ``frames_flags_0``, ``line_double``, ``type_abc``, ``size_big``."""
    def change(conn: sqlite3.Connection) -> None:
        _, outer, frame = _sampling_ids(conn)
        if tag == "frames_flags_0":
            _entry(conn, outer, "Frames", flags=0)
        elif tag == "line_double":
            _entry(conn, frame, "Line", type=20)
        elif tag == "type_abc":
            _entry(conn, frame, "File", type="abc")
        elif tag == "size_big":
            conn.execute("UPDATE NVTX_PAYLOAD_SCHEMAS SET payloadSize = 'big' WHERE schemaId = ?", (frame,))
        else:
            raise ValueError(tag)
    return _edit(PYTHON_SAMPLES, dest_dir / f"hostile_{tag}.sqlite", change)


SCHEMA_EDITS = ("frames_flags_0", "line_double", "type_abc", "size_big")


# -- NCCL payloads of a whole-job export: what `ranks` and `report` decode ------------------------
def _nccl_schema(conn: sqlite3.Connection, field: str) -> int:
    return conn.execute("SELECT schemaId FROM NVTX_PAYLOAD_SCHEMA_ENTRIES WHERE name = ? LIMIT 1",
                        (field,)).fetchone()[0]


def _blobs_of(conn: sqlite3.Connection, schema: int) -> str:
    """SQL condition: the NVTX events whose (first) payload is of ``schema``."""
    return (f"binaryData IS NOT NULL AND length(binaryData) >= 32 AND "
            f"substr(hex(binaryData), 17, 16) = '{struct.pack('<Q', schema).hex().upper()}'")


def nccl_count_past_blob(dest_dir: Path) -> Path:
    """NCCL's init schema with "CUDA device" made an array of 2**62 items of a schema of size -1
    (counted by "No. of ranks", set to 2**62 through an 8-byte type)."""
    def change(conn: sqlite3.Connection) -> None:
        init = _nccl_schema(conn, "Rank")
        item = init + 1000
        conn.execute("INSERT INTO NVTX_PAYLOAD_SCHEMAS (domainId, schemaId, name, type, numEntries, payloadSize) "
                     "VALUES (1, ?, 'item', 1, 1, -1)", (item,))
        conn.execute("INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId, schemaId, idx, type, name, offset) "
                     "VALUES (1, ?, 0, 5, 'x', 0)", (item,))
        _entry(conn, init, "CUDA device", flags=48, arrayOrUnionDetail=0, type=item)
        # the communicator id (an 8-byte hash) is the count: 2**62 in every init blob
        _rewrite_blobs(conn, _blobs_of(conn, init), lambda d: struct.pack_into("<Q", d, _first_payload(d), 1 << 62))
    return _edit(WHOLE_JOB, dest_dir / "hostile_nccl_count.sqlite", change)


def nccl_nranks(dest_dir: Path, nranks: int = (1 << 31) - 1) -> Path:
    """Every NCCL init payload records ``nranks`` ranks."""
    def change(conn: sqlite3.Connection) -> None:
        init = _nccl_schema(conn, "Rank")
        at = conn.execute("SELECT offset FROM NVTX_PAYLOAD_SCHEMA_ENTRIES WHERE schemaId = ? AND "
                          "name = 'No. of ranks'", (init,)).fetchone()[0]
        _rewrite_blobs(conn, _blobs_of(conn, init), lambda d: struct.pack_into("<i", d, _first_payload(d) + at,
                                                                                nranks))
    return _edit(WHOLE_JOB, dest_dir / f"hostile_nccl_nranks_{nranks}.sqlite", change)


def nccl_message_size(dest_dir: Path, size: int = U64_MAX) -> Path:
    """Every NCCL collective payload's "Message size [bytes]" is ``size``."""
    def change(conn: sqlite3.Connection) -> None:
        for schema, at in conn.execute("SELECT DISTINCT schemaId, offset FROM NVTX_PAYLOAD_SCHEMA_ENTRIES "
                                       "WHERE name = 'Message size [bytes]'").fetchall():
            _rewrite_blobs(conn, _blobs_of(conn, schema),
                           lambda d, at=at: struct.pack_into("<Q", d, _first_payload(d) + at, size))
    return _edit(WHOLE_JOB, dest_dir / "hostile_nccl_message_size.sqlite", change)


# -- rank splitting --------------------------------------------------------------------------------
def kernels_own_process(dest_dir: Path, kernels: int) -> Path:
    """The whole-job export with its first ``kernels`` kernels each given a process and device of its
    own (the kernel table copied onto itself first where it holds fewer)."""
    def change(conn: sqlite3.Connection) -> None:
        table = "CUPTI_ACTIVITY_KIND_KERNEL"
        columns = ", ".join(f'"{r[1]}"' for r in conn.execute(f"PRAGMA table_info({table})"))
        while conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] < kernels:
            conn.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {table}")
        conn.execute(f"UPDATE {table} SET globalPid = (rowid + (1 << 22)) << 24, deviceId = rowid + 16 "
                     f"WHERE rowid <= ?", (kernels,))
    return _edit(WHOLE_JOB, dest_dir / f"hostile_own_process_{kernels}.sqlite", change)


# -- Kineto Python stacks: what `profkit host` reads ----------------------------------------------
def kineto_document(base: Path = KINETO_STACKS) -> dict[str, Any]:
    return json.loads(gzip.decompress(base.read_bytes()))


def _write(doc: dict[str, Any], dest: Path) -> Path:
    dest.write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    return dest


def kineto_long_line(dest_dir: Path, digits: int = 5000) -> Path:
    """Every Python frame of the user's file given a line number of ``digits`` digits."""
    doc = kineto_document()
    for event in doc["traceEvents"]:
        name = event.get("name", "")
        if event.get("cat") == "python_function" and ".py(" in name:
            path, rest = name.split(".py(", 1)
            event["name"] = f"{path}.py({'9' * digits}){rest.split(')', 1)[1]}"
    return _write(doc, dest_dir / f"hostile_line_{digits}.json.gz")


def kineto_many_threads(dest_dir: Path, threads: int = 40_000) -> Path:
    """The real trace plus ``threads`` threads holding one Python frame each."""
    doc = kineto_document()
    frame = next(e for e in doc["traceEvents"] if e.get("cat") == "python_function")
    for k in range(threads):
        doc["traceEvents"].append({**frame, "tid": 1_000_000 + k, "ts": frame["ts"] + k, "dur": 1})
    return _write(doc, dest_dir / f"hostile_threads_{threads}.json.gz")


# -- running a recipe: wall time and peak memory of a fresh process --------------------------------
_MEASURE = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
try:
    done = subprocess.run(sys.argv[2:], capture_output=True, timeout=float(sys.argv[1]))
    code, out, err = done.returncode, done.stdout, done.stderr
except subprocess.TimeoutExpired as stopped:  # killed at the timeout
    code, out, err = None, stopped.stdout or b"", stopped.stderr or b""
print(json.dumps({"code": code, "stdout": out.decode("utf-8", "replace"),
                  "stderr": err.decode("utf-8", "replace")[-4000:], "seconds": time.perf_counter() - start,
                  "peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def measure(argv: list[str], env: dict[str, str], timeout: float = 120) -> dict[str, Any]:
    """``python -m profkit ARGV`` in a fresh process: exit code, the tails of stdout and stderr,
    wall seconds and peak RSS in MB (getrusage of the child alone, the way a user's shell would see it)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _MEASURE, str(timeout), sys.executable, "-m", "profkit", *argv],
                         capture_output=True, env=env, timeout=timeout + 30)
    return json.loads(out.stdout)


def kineto_threads_copied(dest_dir: Path) -> Path:
    """The real trace with its Python frames copied onto other threads: all of them onto one, every
    other one 3 us later onto a second, and every tenth, half as long, onto 50 more."""
    doc = kineto_document()
    frames = [e for e in doc["traceEvents"] if e.get("cat") == "python_function"]
    for k, event in enumerate(frames):
        doc["traceEvents"].append({**event, "tid": 99_999})
        if k % 2:
            doc["traceEvents"].append({**event, "tid": 99_998, "ts": event["ts"] + 3})
        if k % 10 == 0:
            doc["traceEvents"].append({**event, "tid": 90_000 + k % 50, "dur": max(1, event.get("dur", 1) // 2)})
    return _write(doc, dest_dir / "hostile_threads_copied.json.gz")
