"""The parts of the stall analysis on small hand-built plain data with known answers.

Nothing here reads an export: the inputs are ApiCall / NvtxRange records and
(start, end) lists written by hand, and each expected value is worked out in
the comment next to it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from profkit.analysis.sync import stalls
from profkit.analysis.sync.events import (
    Step,
    SyncEvent,
    attach_nvtx,
    attach_steps,
    build_events,
    decode_site,
    step_matcher,
)
from profkit.analysis.sync.idle import attach_gpu_idle
from profkit.capture import sync_hook
from profkit.analysis.sync.calls import ApiCall, CallColumns, NvtxRange, api_role, base_api_name

PID = 7 << 24
T1, T2 = PID | 100, PID | 200  # two threads of one process
D2H, H2D, D2D = 2, 1, 8
PAGEABLE, PINNED, DEVICE = 0, 1, 2


def call(name: str, start: int, end: int, tid: int = T1, **kw) -> ApiCall:
    return ApiCall(global_tid=tid, start=start, end=end, name=name, **kw)


def d2h(start: int, end: int, dst: int = PINNED, tid: int = T1, **kw) -> ApiCall:
    return call("cudaMemcpyAsync", start, end, tid, copy_kind=D2H, src_kind=DEVICE, dst_kind=dst, bytes=4, device=0,
                **kw)


def ssync(start: int, end: int, tid: int = T1) -> ApiCall:
    return call("cudaStreamSynchronize", start, end, tid, device=0)


# -- API names -----------------------------------------------------------------------
@pytest.mark.parametrize("raw, base, role", [
    ("cudaStreamSynchronize_v3020", "cudaStreamSynchronize", "sync"),
    ("cudaDeviceSynchronize", "cudaDeviceSynchronize", "sync"),
    ("cudaMemcpyAsync_ptsz_v7000", "cudaMemcpyAsync", "copy"),
    ("cuMemcpyDtoH_v2", "cuMemcpyDtoH", "copy"),
    ("cuStreamWaitEvent_ptsz", "cuStreamWaitEvent", "sync"),
    ("cudaEventSynchronize_v3020", "cudaEventSynchronize", "sync"),
    ("cudaMemset_v3020", "cudaMemset", "memset"),
    ("cudaMemsetAsync_v3020", "cudaMemsetAsync", None),
    ("cudaLaunchKernel_v7000", "cudaLaunchKernel", None),
    ("cudaGetDeviceProperties_v2_v12000", "cudaGetDeviceProperties", None),
])
def test_api_names_and_roles(raw: str, base: str, role: str | None) -> None:
    assert base_api_name(raw) == base
    assert api_role(base) == role


@pytest.mark.parametrize("c, blocks", [
    (ssync(0, 10), True),
    (call("cudaStreamWaitEvent", 0, 1), False),  # the stream waits, not the CPU
    (d2h(0, 10, dst=PINNED), False),  # async into pinned memory returns at once
    (d2h(0, 10, dst=PAGEABLE), True),  # async into pageable memory waits for the copy
    (call("cudaMemcpyAsync", 0, 1, copy_kind=H2D, src_kind=PAGEABLE, dst_kind=DEVICE), True),  # staged by the CPU
    (call("cudaMemcpyAsync", 0, 1, copy_kind=H2D, src_kind=PINNED, dst_kind=DEVICE), False),
    (call("cudaMemcpy", 0, 1, copy_kind=H2D, src_kind=PINNED, dst_kind=DEVICE), True),
    (call("cudaMemcpy", 0, 1, copy_kind=D2D, src_kind=DEVICE, dst_kind=DEVICE), False),
    (call("cudaMemset", 0, 1, mem_kind=DEVICE), False),
    (call("cudaMemset", 0, 1, mem_kind=PINNED), True),
    (call("CUPTI synchronization (Stream sync)", 0, 1, sync_type="Stream sync"), True),
])
def test_which_calls_block_the_cpu(c: ApiCall, blocks: bool) -> None:
    assert c.blocks_cpu is blocks


# -- detection -----------------------------------------------------------------------
def test_copy_then_sync_is_one_event() -> None:
    # .item(): a pinned DtoH copy (0-30) then a stream sync (31-80) on one thread
    [event] = build_events([d2h(0, 30), ssync(31, 80)])
    assert event.api == "cudaMemcpyAsync + cudaStreamSynchronize"
    assert (event.start, event.end) == (0, 80)
    assert event.cpu_blocked_ns == 49  # the sync only: the pinned copy did not wait
    assert event.copy == "Device-to-Host 4 B to Pinned" and event.copy_pattern == "Device-to-Host to Pinned"
    assert event.cause == "blocking copy" and event.device == 0


def test_pageable_copy_then_sync_counts_both_waits() -> None:
    [event] = build_events([d2h(0, 30, dst=PAGEABLE), ssync(31, 80)])
    assert event.cpu_blocked_ns == 30 + 49


def test_lone_calls() -> None:
    events = build_events([
        d2h(0, 10),  # pinned copy, no sync after it on this thread: not an event
        call("cudaMemcpyAsync", 20, 30, copy_kind=D2D, src_kind=DEVICE, dst_kind=DEVICE),  # not a host copy
        d2h(40, 60, dst=PAGEABLE),  # blocks by itself, next call is a memset: an event alone
        call("cudaMemset", 70, 75, mem_kind=PINNED),  # blocking memset
        call("cudaDeviceSynchronize", 80, 95),
    ])
    assert [(e.api, e.cpu_blocked_ns) for e in events] == [
        ("cudaMemcpyAsync", 20), ("cudaMemset", 5), ("cudaDeviceSynchronize", 15)]
    assert [e.cause for e in events] == ["blocking copy", "blocking memset", "device synchronize"]


def test_stream_wait_is_an_event_that_does_not_take_the_copy() -> None:
    events = build_events([d2h(0, 10, dst=PAGEABLE), call("cudaStreamWaitEvent", 20, 25, device=0)])
    assert [(e.api, e.cpu_blocked_ns, e.cause) for e in events] == [
        ("cudaMemcpyAsync", 10, "blocking copy"), ("cudaStreamWaitEvent", 0, "stream wait event")]


def test_copy_and_sync_on_different_threads_stay_apart() -> None:
    # ordered by thread, then start, as iter_api_calls yields them
    events = build_events([d2h(0, 10, tid=T1), ssync(20, 30, tid=T2)])
    assert [e.api for e in events] == ["cudaStreamSynchronize"]
    assert events[0].global_tid == T2


def test_a_device_side_copy_between_a_copy_and_its_sync_does_not_part_them() -> None:
    # .item() with a device-to-device copy (no host, no wait) queued between the copy and the sync
    events = build_events([d2h(0, 10), call("cudaMemcpyAsync", 12, 14, copy_kind=D2D, src_kind=DEVICE,
                                            dst_kind=DEVICE), ssync(20, 30)])
    assert [(e.api, e.cpu_blocked_ns) for e in events] == [("cudaMemcpyAsync + cudaStreamSynchronize", 10)]


def test_a_kernel_launched_between_a_copy_and_a_sync_parts_them() -> None:
    # the copy, then a kernel launch on its thread (launches_through counts it), then the sync:
    # two acts, the copy not an event (pinned), the sync alone
    columns = CallColumns.from_records([d2h(0, 10), ssync(20, 30)])
    columns.launches_through = np.array([0, 1])
    assert [e.api for e in build_events(columns)] == ["cudaStreamSynchronize"]
    columns.launches_through = np.array([3, 3])  # launches before the copy only: still .item()
    assert [e.api for e in build_events(columns)] == ["cudaMemcpyAsync + cudaStreamSynchronize"]


def test_a_copy_held_across_another_thread_is_let_go() -> None:
    # input out of thread order: T1's copy, a T2 call, then T1's sync; the walk lets the copy go
    # at the change of thread, so the sync stands alone and the pinned copy is no event
    events = build_events([d2h(0, 10, tid=T1), ssync(12, 14, tid=T2), ssync(20, 30, tid=T1)])
    assert [(e.api, e.global_tid) for e in events] == [("cudaStreamSynchronize", T2), ("cudaStreamSynchronize", T1)]


@pytest.mark.parametrize("kind, cause", [
    ("item", ".item()"), ("cpu", ".cpu()"), ("tolist", ".tolist()"), ("print/format", "print/format"),
    ("truthiness", "truthiness"), ("synchronize", "torch.cuda.synchronize()"), ("future-kind", "future-kind"),
])
def test_cause_from_the_python_record(kind: str, cause: str) -> None:
    event = SyncEvent(T1, (d2h(0, 10), ssync(11, 20)), kind=kind)
    assert event.cause == cause


@pytest.mark.parametrize("name, cause", [
    ("cudaStreamSynchronize", "stream synchronize"), ("cudaDeviceSynchronize", "device synchronize"),
    ("cudaEventSynchronize", "event synchronize"), ("cudaStreamWaitEvent", "stream wait event"),
    ("cuCtxSynchronize", "device synchronize"),
])
def test_cause_from_the_api_without_a_record(name: str, cause: str) -> None:
    assert SyncEvent(T1, (call(name, 0, 1),)).cause == cause


# -- GPU idle ------------------------------------------------------------------------
def idle(events: list[SyncEvent], activity: dict[int, list[tuple[int, int]]], batch: int = 2) -> None:
    """attach_gpu_idle with the activity served in small batches (crossing batch edges)."""
    def source(device: int):
        rows = sorted(activity.get(device, []))
        return [rows[i:i + batch] for i in range(0, len(rows), batch)]
    attach_gpu_idle(events, sorted(activity), source)


@pytest.mark.parametrize("batch", [1, 2, 100])
def test_gap_after_a_sync(batch: int) -> None:
    # kernels 0-100, 150-200 and 400-500; the sync runs 120-300.
    # busy frontier before 300: 200; next start at or after 300: 400 -> idle 200-400
    e = SyncEvent(T1, (ssync(120, 300),))
    idle([e], {0: [(0, 100), (150, 200), (400, 500)]}, batch)
    assert (e.idle_start, e.idle_end, e.gpu_idle_ns) == (200, 400, 200)


def test_gap_starts_no_earlier_than_the_sync() -> None:
    # GPU idle since 100, the sync is only called at 250: idle 250-400 (150), not 100-400
    e = SyncEvent(T1, (ssync(250, 260),))
    idle([e], {0: [(0, 100), (400, 500)]})
    assert (e.idle_start, e.idle_end, e.gpu_idle_ns) == (250, 400, 150)


def test_gpu_still_busy_past_the_next_start() -> None:
    # a long kernel 0-1000 on another stream covers the whole window: no idle
    e = SyncEvent(T1, (ssync(100, 200),))
    idle([e], {0: [(0, 1000), (300, 350)]})
    assert e.gpu_idle_ns == 0


def test_nothing_after_the_sync() -> None:
    e = SyncEvent(T1, (ssync(100, 200),))
    idle([e], {0: [(0, 150)]})
    assert (e.gpu_idle_ns, e.idle_start, e.idle_end) == (0, None, None)


def test_back_to_back_syncs_split_the_gap() -> None:
    # work ends at 100; sync A 110-120, sync B 200-210, next work at 500.
    # A: 110-200 (90), B: 200-500 (300); together exactly the gap 110-500.
    a, b = SyncEvent(T1, (ssync(110, 120),)), SyncEvent(T1, (call("cudaDeviceSynchronize", 200, 210, device=0),))
    idle([a, b], {0: [(0, 100), (500, 600)]})
    assert (a.idle_start, a.idle_end, a.gpu_idle_ns) == (110, 200, 90)
    assert (b.idle_start, b.idle_end, b.gpu_idle_ns) == (200, 500, 300)


def test_events_on_other_devices_do_not_share_gaps() -> None:
    a = SyncEvent(T1, (call("cudaStreamSynchronize", 110, 120, device=0),))
    b = SyncEvent(T2, (call("cudaStreamSynchronize", 130, 140, device=1),))
    idle([a, b], {0: [(0, 100), (500, 600)], 1: [(0, 100), (300, 400)]})
    assert (a.gpu_idle_ns, b.gpu_idle_ns) == (500 - 110, 300 - 130)


def test_unknown_device_is_priced_where_the_gpu_was_busy_last() -> None:
    # cudaDeviceSynchronize has no activity row; device 1 ran until 250, device 0 until 100
    e = SyncEvent(T1, (call("cudaDeviceSynchronize", 200, 300),))
    assert e.device is None
    idle([e], {0: [(0, 100), (900, 950)], 1: [(0, 250), (400, 450)]})
    assert (e.device, e.idle_start, e.idle_end) == (1, 250, 400)


def test_unknown_device_on_a_tie_goes_to_the_larger_device() -> None:
    # both devices ran until 250 (max over (frontier, device) picks device 1); next work: 400 on device 1
    e = SyncEvent(T1, (call("cudaDeviceSynchronize", 200, 300),))
    idle([e], {0: [(0, 250), (900, 950)], 1: [(0, 250), (400, 450)]})
    assert (e.device, e.idle_start, e.idle_end) == (1, 250, 400)


# -- Python records and NVTX ranges --------------------------------------------------------
def site_text(kind: str, where: str, code: str) -> str:
    return sync_hook.encode_site(kind, where.rpartition(":")[0], int(where.rpartition(":")[2]), code)


def rng(start: int, end: int, text: str, tid: int = T1, domain: str | None = None, push_pop: bool = True):
    return NvtxRange(tid, start, end, text, domain, push_pop)


def test_decode_site_formats() -> None:
    assert decode_site(site_text("item", "train.py:42", "print(loss.item())")) == (
        "item", "train.py:42", "print(loss.item())")
    # the hook replaces "|" in code by "¦"; it reads back as "|"
    assert decode_site(site_text("truthiness", "a.py:3", "if (x | y).any():"))[2] == "if (x | y).any():"
    assert decode_site("step") is None and decode_site(None) is None and decode_site("") is None


def test_decode_site_keeps_reading_the_recorded_format(monkeypatch: pytest.MonkeyPatch) -> None:
    # should the hook change its encoding, ranges in the committed exports still decode
    # (the hook no longer re-exports model.sync_sites.decode_site; should it grow one again, it is replaced)
    monkeypatch.setattr(sync_hook, "decode_site", lambda text: None, raising=False)
    assert decode_site("profkit.sync|cpu|../x/y.py:7|h = t.cpu()") == ("cpu", "../x/y.py:7", "h = t.cpu()")


def test_innermost_python_record_on_the_same_thread() -> None:
    # step 0-1000 > outer hook range 100-400 (print) > inner hook range 150-300 (item) > the sync 200-250
    events = [SyncEvent(T1, (d2h(180, 190), ssync(200, 250))),
              SyncEvent(T1, (ssync(500, 520),)),  # in the step, no hook range
              SyncEvent(T2, (ssync(200, 250),))]  # same time, other thread: no range at all
    ranges = [rng(0, 1000, "step", domain="samples"),
              rng(100, 400, site_text("print/format", "t.py:9", "print(f'{x}')"), domain="profkit.sync"),
              rng(150, 300, site_text("item", "t.py:9", "x.item()"), domain="profkit.sync")]
    attach_nvtx(events, ranges)
    first, second, other = events
    assert (first.kind, first.source, first.code) == ("item", "t.py:9", "x.item()")
    assert [r.name for r in first.nvtx] == ["samples:step"]  # hook ranges are not NVTX context
    assert (second.kind, second.source) == (None, None) and [r.name for r in second.nvtx] == ["samples:step"]
    assert (other.source, other.nvtx) == (None, ())


def test_the_waiting_call_must_lie_inside_the_record() -> None:
    # hook range 100-200 closes before the sync 210-230 starts: not its record
    [event] = events = [SyncEvent(T1, (ssync(210, 230),))]
    attach_nvtx(events, [rng(100, 200, site_text("item", "a.py:1", "x.item()"))])
    assert event.source is None


# Which ranges are steps is profkit.analysis.steps.find_steps's job (tests/test_steps*.py);
# the stall analysis only labels a sync's innermost step range with the step's name.
def test_step_matcher_takes_numbered_and_domain_names() -> None:
    assert step_matcher("samples:step")(rng(0, 1, "step", domain="samples"))
    assert step_matcher("step")(rng(0, 1, "step 7"))
    assert not step_matcher("step")(rng(0, 1, "stepper"))


def test_steps_collect_their_syncs_and_the_idle_inside_them() -> None:
    steps = [Step(0, "step", T1, 0, 100), Step(1, "step", T1, 100, 200)]
    a = SyncEvent(T1, (ssync(50, 60),), gpu_idle_ns=70, idle_start=60, idle_end=130)  # idle spills into step 1
    b = SyncEvent(T2, (ssync(150, 160),), gpu_idle_ns=10, idle_start=160, idle_end=170)  # other thread, same process
    c = SyncEvent(T1, (ssync(250, 260),), gpu_idle_ns=5, idle_start=260, idle_end=265)  # after the steps
    attach_steps([a, b, c], steps)
    assert (a.step, b.step, c.step) == (0, 1, None)
    assert [(s.syncs, s.cpu_blocked_ns, s.gpu_idle_ns) for s in steps] == [(1, 10, 40), (1, 10, 30 + 10)]
    assert [s.estimated_without_syncs_ns for s in steps] == [60, 60]


def test_a_warm_up_syncs_drain_is_no_steady_steps_cost() -> None:
    """A sync in the warm-up step whose idle runs into the first steady step's window (that step's
    range opened on the drained GPU) charges the warm-up step alone: a per-step cost counts the
    steady steps' own syncs (the zoo's amp_bf16 had a warm-up sync priced per steady step)."""
    steps = [Step(0, "step", T1, 0, 100, phase="warmup"), Step(1, "step", T1, 100, 200)]
    a = SyncEvent(T1, (ssync(50, 60),), gpu_idle_ns=70, idle_start=60, idle_end=130)
    attach_steps([a], steps)
    assert a.step == 0 and a.steady_idle_ns == 0
    assert [s.gpu_idle_ns for s in steps] == [40, 0]


# -- aggregation and findings ---------------------------------------------------------
def test_sites_group_by_line_or_by_api_and_range(tmp_path: Path) -> None:
    src = tmp_path / "proj" / "train.py"
    src.parent.mkdir()
    src.write_text("import torch\n\nprint(loss.item())\n")
    step = rng(0, 10_000, "step")
    events = []
    for i in range(3):  # one .item() per step, 1000 ns idle each
        e = SyncEvent(T1, (d2h(i * 100, i * 100 + 5), ssync(i * 100 + 6, i * 100 + 20)), kind="item",
                      source="../../x/proj/train.py:3", code="print(loss.item())", gpu_idle_ns=1000,
                      steady_idle_ns=1000)
        e.step, e.nvtx = i, (step,)
        events.append(e)
    unknown = SyncEvent(T1, (call("cudaDeviceSynchronize", 900, 950),), gpu_idle_ns=10)
    events.append(unknown)

    def label(e):
        return stalls.nvtx_label(e, step_matcher("step"), "step")

    sites = stalls.aggregate_sites(events, 3, label, roots=[tmp_path])
    assert [(s["source"], s["count"], s["gpu_idle_ns"], s["nvtx"]) for s in sites] == [
        ("../../x/proj/train.py:3", 3, 3000, "step"), (None, 1, 10, stalls.NO_RANGE)]
    first = sites[0]
    assert (first["file"], first["line"], first["code"]) == ("../../x/proj/train.py", 3, "print(loss.item())")
    assert first["local_path"] == str(src) and first["local_code"] == "print(loss.item())"
    assert first["cpu_blocked_ns"] == 3 * 14 and first["per_step"] == {
        "syncs": 1.0, "cpu_blocked_ns": 14.0, "gpu_idle_ns": 1000.0, "steps_with_sync": 3, "steady_steps": 3}
    assert first["thread"] == 100 and first["api"] == "cudaMemcpyAsync + cudaStreamSynchronize"
    stats = {"median_ns": 10_000, "mean_ns": 10_000, "sync_gpu_idle_mean_ns": 1000, "sync_gpu_idle_pct": 10.0,
             "estimated_median_without_syncs_ns": 9000}
    findings = stalls.write_findings(sites, stats, "step", None, 5.0)
    assert findings == [
        ("train.py:3 `print(loss.item())` synchronizes 3 times in the steady steps, 1 per step, costing 0.001 ms "
         "per step "
        "in GPU idle time (10% of the steady-state step time: a mean step of 0.01 ms; median step 0.01 ms)"),
        ("Synchronizations leave the GPU idle 0.001 ms per step (10% of the steady-state step time: a mean step of "
         "0.01 ms); estimated median "
        "step time without them: 0.009 ms instead of 0.01 ms (an estimate: a launch-bound loop gains less)"),
    ]
    assert stalls.write_findings(sites, stats, "step", None, 11.0) == []
    by_nvtx = stalls.aggregate_by_nvtx(events, label)
    assert [(r["nvtx"], r["count"], r["sites"], r["source_unknown"]) for r in by_nvtx] == [
        ("step", 3, 1, 0), (stalls.NO_RANGE, 1, 0, 1)]


def test_findings_count_the_steady_steps_syncs_and_estimate_only_a_change() -> None:
    """HTA's simple_add trace: a site synced in a warm-up step and in one of 3 steady steps read
    "synchronizes 2 times, 0.33 per step"; and a median step that holds no sync was estimated at
    "16.5 ms instead of 16.5 ms"."""
    site = {"source": "train.py:3", "file": "train.py", "line": 3, "code": "", "in_steps": 2,
            "per_step": {"syncs": 1 / 3, "cpu_blocked_ns": 10.0, "gpu_idle_ns": 18e6, "steps_with_sync": 1,
                         "steady_steps": 3}}
    stats = {"median_ns": 16.5e6, "mean_ns": 105.7e6, "sync_gpu_idle_mean_ns": 18e6, "sync_gpu_idle_pct": 17.0,
             "estimated_median_without_syncs_ns": 16.5e6}
    site_line, total_line = stalls.write_findings([site], stats, "step", None, 5.0)
    assert "synchronizes once in the steady steps, 0.33 per step" in site_line
    assert "(17% of the steady-state step time: a mean step of 105.7 ms; median step 16.5 ms)" in site_line
    assert total_line.endswith("(17% of the steady-state step time: a mean step of 105.7 ms)")


def test_findings_without_steps_compare_with_the_run() -> None:
    site = {"source": None, "api": "cudaDeviceSynchronize", "copy_pattern": None, "nvtx": stalls.NO_RANGE,
            "count": 4, "gpu_idle_ns": 2_000_000, "per_step": None, "in_steps": 0}
    assert stalls.write_findings([site], None, None, 10_000_000, 5.0) == [
        "cudaDeviceSynchronize (source unknown) synchronizes 4 times, costing 2 ms of GPU idle time (20% of the run)"]
    assert stalls.write_findings([site], None, None, 100_000_000, 5.0) == []


def test_local_source_line_tails(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("a = 1\n  b  =   x.item()  \n")
    assert stalls.local_source_line("../../../elsewhere/pkg/m.py:2", [tmp_path]) == (
        str(tmp_path / "pkg" / "m.py"), "b = x.item()")
    assert stalls.local_source_line("nowhere/zzz_missing.py:2", [tmp_path]) == (None, None)
    assert stalls.local_source_line("<stdin>:1", [tmp_path]) == (None, None)
