"""The Kineto reader against its input: every model table equals what plain
Python computes from the trace's raw JSON (``json`` + ``gzip``, no profkit).

Runs on every real torch.profiler capture committed under tests/data/kineto
and tests/data/ddp (made on the GPU host by scripts/make_fixtures.sh).
Times are ``round(ts * 1000)`` and ``round(dur * 1000)`` ns, end = start + dur.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from profkit.readers import open_trace
from tests.conftest import DATA, default_run

KINETO_TRACES = sorted([*DATA.glob("kineto/**/*.json.gz"), *DATA.glob("kineto/**/*.json"),
                        *DATA.glob("ddp/**/*.json.gz"), *DATA.glob("ddp/**/*.json")])
needs_traces = pytest.mark.skipif(not KINETO_TRACES, reason="no Kineto fixture committed yet")
STEP = re.compile(r"ProfilerStep#\d+")


def raw(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt") as f:
        return json.load(f)


def ns(us: float) -> int:
    return round(us * 1000)


def complete(doc: dict[str, Any], *cats: str) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in cats]


def span(e: dict[str, Any]) -> tuple[int, int]:
    start = ns(e["ts"])
    return start, start + ns(e["dur"])


@pytest.fixture(scope="module", params=default_run(KINETO_TRACES), ids=lambda p: p.name)
def pair(request: pytest.FixtureRequest) -> tuple[Any, dict[str, Any]]:
    return open_trace(request.param), raw(request.param)


pytestmark = needs_traces


def test_kernels_equal_the_raw_kernel_events(pair: tuple[Any, dict[str, Any]]) -> None:
    trace, doc = pair
    expected = [(e["name"], *span(e), e["args"]["device"], e["args"]["stream"], e["args"]["correlation"],
                 *e["args"]["grid"], *e["args"]["block"], e["args"]["registers per thread"],
                 e["args"]["shared memory"]) for e in complete(doc, "kernel")]
    k = trace.table("kernels", ["name", "start", "end", "device", "stream", "correlation", "grid_x", "grid_y",
                                "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
                                "static_smem_bytes", "dynamic_smem_bytes"])
    assert (k["dynamic_smem_bytes"] == 0).all()  # Kineto records static + dynamic as one number
    got = list(zip(*(k[c].tolist() for c in k.columns[:-1])))
    assert got == expected  # file order


def test_api_equals_the_raw_runtime_and_driver_events(pair: tuple[Any, dict[str, Any]]) -> None:
    trace, doc = pair
    expected = Counter((e["name"], *span(e), e["pid"], e["tid"], e["args"].get("correlation", -1),
                        "runtime" if e["cat"] == "cuda_runtime" else "driver")
                       for e in complete(doc, "cuda_runtime", "cuda_driver"))
    a = trace.table("api", ["name", "start", "end", "pid", "tid", "correlation", "layer"])
    assert Counter(zip(*(a[c].tolist() for c in a.columns))) == expected


def test_memcpy_and_memset_equal_the_raw_events(pair: tuple[Any, dict[str, Any]]) -> None:
    trace, doc = pair
    kinds = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "DtoD": "Device-to-Device",
             "HtoH": "Host-to-Host", "PtoP": "Peer-to-Peer"}
    copies = []
    for e in complete(doc, "gpu_memcpy"):
        m = re.fullmatch(r"Memcpy (\w+) \((.+) -> (.+)\)", e["name"])
        device = e["args"].get("device", e["args"].get("inDevice"))
        copies.append((*span(e), device, e["args"]["stream"], e["args"]["bytes"], kinds.get(m[1], m[1]), m[2], m[3]))
    c = trace.table("memcpy", ["start", "end", "device", "stream", "bytes", "copy_kind", "src_kind", "dst_kind"])
    assert list(zip(*(c[col].tolist() for col in c.columns))) == copies
    sets = [(*span(e), e["args"]["bytes"], re.fullmatch(r"Memset \((.+)\)", e["name"])[1])
            for e in complete(doc, "gpu_memset")]
    s = trace.table("memset", ["start", "end", "bytes", "dst_kind"])
    assert list(zip(*(s[col].tolist() for col in s.columns))) == sets


def test_ranges_equal_the_raw_annotations(pair: tuple[Any, dict[str, Any]]) -> None:
    trace, doc = pair
    expected = Counter()
    for e in complete(doc, "user_annotation", "gpu_user_annotation", "cpu_op"):
        if e["cat"] == "cpu_op" and not STEP.fullmatch(e["name"]):
            continue
        if e["name"].startswith("profkit.sync|"):
            kind, domain = "sync_site", "profkit.sync"
        elif e["cat"] == "gpu_user_annotation":
            kind, domain = "gpu_user_annotation", e["cat"]
        else:
            kind, domain = ("profiler_step" if STEP.fullmatch(e["name"]) else "user_annotation"), e["cat"]
        gpu = e["cat"] == "gpu_user_annotation"
        expected[(e["name"], *span(e), -1 if gpu else e["tid"], domain, kind)] += 1
    r = trace.table("ranges", ["name", "start", "end", "tid", "domain", "kind"])
    assert Counter(zip(*(r[c].tolist() for c in r.columns))) == expected


def test_cpu_ops_equal_the_raw_cpu_ops(pair: tuple[Any, dict[str, Any]]) -> None:
    trace, doc = pair
    expected = [(e["name"], *span(e), e["tid"], e.get("args", {}).get("External id", -1))
                for e in complete(doc, "cpu_op") if not STEP.fullmatch(e["name"])]
    o = trace.table("cpu_ops", ["name", "start", "end", "tid", "external_id"])
    assert list(zip(*(o[c].tolist() for c in o.columns))) == expected


def test_syncs_equal_the_raw_cuda_sync_events(pair: tuple[Any, dict[str, Any]]) -> None:
    trace, doc = pair
    labels = {"Event Sync": "Event sync", "Stream Wait Event": "Stream wait sync", "Stream Sync": "Stream sync",
              "Context Sync": "Context sync"}
    expected = [(*span(e), e["args"].get("correlation", -1),
                 labels.get(e["args"].get("cuda_sync_kind", e["name"]), e["args"].get("cuda_sync_kind", e["name"])))
                for e in complete(doc, "cuda_sync")]
    s = trace.table("syncs", ["start", "end", "correlation", "sync_type"])
    assert list(zip(*(s[c].tolist() for c in s.columns))) == expected


def test_devices_processes_threads_and_meta(pair: tuple[Any, dict[str, Any]]) -> None:
    trace, doc = pair
    d = trace.devices
    props = doc.get("deviceProperties") or []
    assert d["device"].tolist() == [p["id"] for p in props]
    assert d["name"].tolist() == [p["name"] for p in props]
    for key, column in (("numSms", "sm_count"), ("computeMajor", "cc_major"), ("computeMinor", "cc_minor"),
                        ("regsPerMultiprocessor", "max_registers_per_sm"), ("warpSize", "warp_size"),
                        ("maxThreadsPerMultiprocessor", "max_threads_per_sm"),
                        ("sharedMemPerBlockOptin", "max_shared_memory_per_block")):
        assert d[column].tolist() == [p.get(key, -1) for p in props], column
    meta_events = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    assert sorted(trace.table("processes")["pid"].tolist()) == sorted(
        e["pid"] for e in meta_events if e["name"] == "process_name")
    assert sorted(trace.table("threads")["name"].tolist()) == sorted(
        e["args"]["name"] for e in meta_events if e["name"] == "thread_name")
    dist = doc.get("distributedInfo") or {}
    assert (trace.meta.rank, trace.meta.world_size) == (dist.get("rank"), dist.get("world_size"))
    assert trace.meta.extra["base_time_ns"] == doc.get("baseTimeNanoseconds")
    assert trace.meta.schema_version == str(doc["schemaVersion"])
    assert trace.meta.extra["skipped_events"] == {}


DDP_FOLDERS = [p for p in (DATA / "ddp" / "kineto", DATA / "ddp" / "kineto_slow") if p.is_dir()]


@pytest.mark.skipif(not DDP_FOLDERS, reason="no DDP Kineto fixture committed yet")
@pytest.mark.parametrize("folder", DDP_FOLDERS, ids=lambda p: p.name)
def test_a_folder_of_real_rank_traces_points_at_profkit_ranks(folder: Path) -> None:
    """torch.profiler wrote one trace per DDP rank into one folder: reading it as one
    trace would add the ranks up, so it is a one-line error naming both ranks."""
    from profkit.errors import ProfkitError

    ranks = sorted(raw(p)["distributedInfo"]["rank"] for p in folder.glob("*.json*"))
    assert ranks == [0, 1]
    with pytest.raises(ProfkitError) as info:
        open_trace(folder)
    line = info.value.one_line()
    assert "2 ranks" in line and "rank 0:" in line and "rank 1:" in line and "profkit ranks" in line
