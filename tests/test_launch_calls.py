"""Each GPU operation's launching CUDA call (``profkit.analysis.timeline.launch_calls``).

Oracles: for nsys exports, the join done here in plain SQL on the export
(GPU rows LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME on correlationId and
process, in rowid order, which is the model's row order); for Kineto
traces, the raw JSON (each GPU event's args.correlation and the
cuda_runtime/cuda_driver event with the same one).  The rules for repeated
correlation ids, which no capture has, are checked on a hand-built trace.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import Counter

import numpy as np
import pytest

from profkit.analysis.timeline.launch_calls import GPU_TABLES, launch_calls
from profkit.model.trace import Trace
from profkit.readers import open_trace
from tests.conftest import DATA, nsys_fixture
from tests.synthetic_trace import SyntheticSource

MASK = 0xFFFFFF
SQL_TABLES = {"kernels": "CUPTI_ACTIVITY_KIND_KERNEL", "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
              "memset": "CUPTI_ACTIVITY_KIND_MEMSET", "syncs": "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
              "graphs": "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"}
# One process; two processes calling CUDA (gelu, softmax: the key is (pid, correlation)); nsys 2023.4;
# CUDA graph replays recorded one row each (their cudaGraphLaunch calls).
NSYS = ["nsys2025_train_print", "nsys2025_gelu", "nsys2025_softmax", "nsys2023_sync", "../graphs/gpt_graphs_graph"]
KINETO = ["kineto/gpt_eager.json.gz", "kineto/mlp_print.json.gz", "ddp/kineto/rank1.json.gz"]


@pytest.mark.parametrize("name", NSYS)
def test_nsys_launches_equal_the_sql_join(name: str) -> None:
    conn = sqlite3.connect(f"file:{nsys_fixture(name)}?mode=ro&immutable=1", uri=True)
    present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    with open_trace(nsys_fixture(name)) as trace:
        api_start, api_end = trace.array("api", "start"), trace.array("api", "end")
        api_tid = trace.array("api", "tid")
        checked = 0
        for table in GPU_TABLES:
            if SQL_TABLES[table] not in present:
                continue
            expected = conn.execute(f"""SELECT r.start, r."end", r.globalTid & {MASK}
                FROM {SQL_TABLES[table]} AS g LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r
                  ON r.correlationId = g.correlationId AND (r.globalTid >> 24) & {MASK} = (g.globalPid >> 24) & {MASK}
                ORDER BY g.rowid, r.rowid""").fetchall()
            rows, calls = launch_calls(trace, table).pairs()
            got = [(int(api_start[c]), int(api_end[c]), int(api_tid[c])) if c >= 0 else (None, None, None)
                   for c in calls.tolist()]
            assert got == expected, table
            assert len(launch_calls(trace, table)) == trace.count(table)
            checked += len(expected)
        assert checked > 0


@pytest.mark.parametrize("name", KINETO)
def test_kineto_launches_equal_the_json(name: str) -> None:
    with gzip.open(DATA / name, "rt") as f:
        events = json.load(f)["traceEvents"]
    calls = {e["args"]["correlation"]: round(e["ts"] * 1000) for e in events
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}
    expected = Counter((round(e["ts"] * 1000), calls.get(e["args"].get("correlation")))
                       for e in events if e.get("cat") == "kernel")
    with open_trace(DATA / name) as trace:
        call = launch_calls(trace, "kernels").call
        api_start = trace.array("api", "start")
        got = Counter((int(s), int(api_start[c]) if c >= 0 else None)
                      for s, c in zip(trace.array("kernels", "start").tolist(), call.tolist()))
    assert got == expected
    assert sum(1 for _, launch in expected.elements() if launch is not None) > 100


def synthetic_repeats() -> Trace:
    """Hand-built: correlation 5 has two calls in process 1 (the later row starts first), one in
    process 2; correlation 7 has none in process 1; -1 matches -1 of the same process (SQL equality)."""
    return Trace(SyntheticSource({
        "api": {"start": [100, 50, 10, 70, 30], "end": [110, 60, 20, 80, 40], "pid": [1, 1, 2, 2, 1],
                "tid": [1, 1, 2, 2, 1], "correlation": [5, 5, 5, 7, -1], "name": ["cudaLaunchKernel"] * 5},
        "kernels": {"start": [200, 210, 220, 230, 240], "end": [201, 211, 221, 231, 241], "pid": [1, 2, 1, 1, 3],
                    "correlation": [5, 5, 7, -1, 5], "name": ["k"] * 5, "device": [0] * 5, "stream": [7] * 5},
    }, "synthetic_repeats"))


def test_synthetic_repeated_correlation_ids() -> None:
    calls = launch_calls(synthetic_repeats(), "kernels")
    assert calls.call.tolist() == [0, 2, -1, 4, -1]          # the first call in row order
    rows, matched = calls.pairs()                             # every call (nvtx_kern_sum's LEFT JOIN)
    assert list(zip(rows.tolist(), matched.tolist())) == [(0, 0), (0, 1), (1, 2), (2, -1), (3, 4), (4, -1)]
    api_start = np.array([100, 50, 10, 70, 30])
    assert calls.earliest(api_start).tolist() == [1, 2, -1, 4, -1]  # the call that started first
    assert calls.calls_of(0).tolist() == [0, 1] and calls.calls_of(2).tolist() == []


def test_key_index_spans_and_matched_equal_a_dict_of_keys() -> None:
    """``KeyIndex``, the one (pid, correlation) index: every query's rows ([lo, hi) of the
    sorted keys), and which rows some query finds, by process and by correlation alone."""
    from profkit.analysis.timeline.launch_calls import KeyIndex

    rng = np.random.default_rng(3)
    for _ in range(300):
        n, m = int(rng.integers(0, 40)), int(rng.integers(0, 40))
        pid = rng.choice([-1, 7, 9] if rng.random() < 0.5 else [7], n)
        corr = rng.integers(-1, 12, n)
        q_pid, q_corr = rng.choice([-1, 7, 8, 9], m), rng.integers(-2, 14, m)
        for by_process in (True, False):
            index = KeyIndex(pid if by_process else None, corr)
            key = (lambda p, c: (int(p), int(c))) if by_process else (lambda p, c: int(c))
            rows_of: dict = {}
            for row, (p, c) in enumerate(zip(pid, corr)):
                rows_of.setdefault(key(p, c), []).append(row)
            lo, hi = index.spans(q_pid if by_process else None, q_corr)
            for i, (p, c) in enumerate(zip(q_pid, q_corr)):
                assert sorted(index.rows(np.arange(lo[i], hi[i])).tolist()) == rows_of.get(key(p, c), [])
            wanted = {key(p, c) for p, c in zip(q_pid, q_corr)}
            assert index.matched(q_pid if by_process else None, q_corr).tolist() == \
                [key(p, c) in wanted for p, c in zip(pid, corr)]
            first = index.match(q_pid if by_process else None, q_corr).call.tolist()
            assert first == [rows_of.get(key(p, c), [-1])[0] for p, c in zip(q_pid, q_corr)]
