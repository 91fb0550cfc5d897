"""NCCL message sizes from nsys: NCCL's NVTX payloads in tests/data/ddp/whole2 (exported with
--include-blobs=true) against what the same DDP program sent, as torch recorded it in the Kineto
fixtures (raw JSON, not profkit's reader), and against the payload bytes decoded by hand."""

from __future__ import annotations

import gzip
import json
import sqlite3
import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from profkit.readers import open_trace

DDP = Path(__file__).parent / "data" / "ddp"
WHOLE = DDP / "whole2" / "whole.sqlite.xz"
needs_whole = pytest.mark.skipif(not WHOLE.exists(), reason="whole2 fixture missing")
FLOAT_BYTES = 4  # the Kineto fixtures' dtype 'Float'


@pytest.fixture(scope="module")
def whole() -> Path:
    from tests.conftest import _decompressed

    return _decompressed(WHOLE)


@pytest.fixture(scope="module")
def nsys_kernels(whole: Path) -> dict[str, np.ndarray]:
    trace = open_trace(whole)
    try:
        k = trace.table("kernels", ["name", "pid", "collective", "msg_bytes", "group_size", "msg_in_nelems"])
    finally:
        trace.close()
    return {c: k[c].astype(str).to_numpy() if c in ("name", "collective") else k[c].to_numpy() for c in k.columns}


def _kineto_allreduce_bytes(rank: int) -> set[int]:
    with gzip.open(DDP / "kineto" / f"rank{rank}.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    args = [e["args"] for e in events if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()]
    assert args and all(a["dtype"] == "Float" and a["Collective name"] == "allreduce" for a in args)
    return {a["In msg nelems"] * FLOAT_BYTES for a in args}


@needs_whole
def test_steady_allreduce_sizes_match_kineto(nsys_kernels: dict[str, np.ndarray]) -> None:
    k = nsys_kernels
    allreduce = k["collective"] == "allreduce"
    assert allreduce.sum() == sum("AllReduce" in n for n in k["name"])  # every all-reduce kernel linked
    assert (k["msg_bytes"][allreduce] > 0).all() and (k["group_size"][allreduce] == 2).all()
    # The steps' buckets repeat every step on each rank; one-off calls (start-up, DDP's first
    # step before it rebuilds its buckets) happen once per rank and are outside Kineto's window.
    for pid in np.unique(k["pid"][allreduce]):
        counts = Counter(k["msg_bytes"][allreduce & (k["pid"] == pid)].tolist())
        steady = {size for size, n in counts.items() if n > 1}
        assert steady == _kineto_allreduce_bytes(0) == _kineto_allreduce_bytes(1) == {1051648, 13814784}
    # no elements or dtype in the payload: those stay unknown
    assert (k["msg_in_nelems"] == -1).all()


@needs_whole
def test_payload_decoded_by_hand(whole: Path, nsys_kernels: dict[str, np.ndarray]) -> None:
    conn = sqlite3.connect(f"file:{whole}?mode=ro&immutable=1", uri=True)
    try:
        # "Message size [bytes]" of the all-reduce schema: type 22 (NVTX_PAYLOAD_ENTRY_TYPE_SIZE, size_t)
        schema_id, kind, offset = conn.execute(
            "SELECT e.schemaId, e.type, e.offset FROM NVTX_PAYLOAD_SCHEMA_ENTRIES e WHERE e.name = "
            "'Message size [bytes]' AND e.schemaId IN (SELECT schemaId FROM NVTX_PAYLOAD_SCHEMA_ENTRIES "
            "WHERE name = 'Reduction operation')").fetchone()
        assert kind == 22
        blobs = [bytes(b) for (b,) in conn.execute(
            "SELECT e.binaryData FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
            "WHERE s.value = 'ncclAllReduce' AND e.binaryData IS NOT NULL")]
    finally:
        conn.close()
    sizes = []
    for blob in blobs:
        count, blob_schema, size, at = struct.unpack_from("<QQQQ", blob, 0)  # count, then {schemaId, size, offset}
        assert count == 1 and blob_schema == schema_id and at + size == len(blob)
        sizes.append(struct.unpack_from("<Q", blob, at + offset)[0])
    assert len(sizes) == 48  # 24 all-reduce calls per rank, as the kernel oracle counts
    allreduce = nsys_kernels["collective"] == "allreduce"
    assert Counter(sizes) == Counter(nsys_kernels["msg_bytes"][allreduce].tolist())


def test_export_without_blobs_stays_unknown() -> None:
    from tests.conftest import _decompressed

    trace = open_trace(_decompressed(DDP / "per_rank2" / "rank0.sqlite.xz"))
    try:
        k = trace.table("kernels", ["name", "collective", "msg_bytes", "group_size"])
    finally:
        trace.close()
    nccl = k["name"].astype(str).str.startswith("nccl").to_numpy()
    assert nccl.any()
    assert (k["msg_bytes"].to_numpy() == -1).all() and (k["group_size"].to_numpy() == -1).all()
    assert set(k["collective"].astype(str)) == {""}
