"""`profkit memory` on real CUDA captures of the GPT training loop (tests/data/memory/cuda, made on an
H100 by ``scripts/make_memory_fixtures.sh OUTDIR gpu`` and ``gpt_memory.py --oom``).

Truths: what the program planted and printed under the capture (``MEM_TRUTH``: each step's peak
from ``torch.cuda.max_memory_allocated``/``max_memory_reserved`` after a reset at the step's start,
the bytes still allocated at each step's end, the leaked tensor's size, the failed request's size
as the OOM observer was told it), and the snapshot pickles' own rows; never profkit's code.
"""

from __future__ import annotations

import json
import pickle
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from profkit.analysis.memory import BEFORE_TRACE, memory_report
from profkit.analysis.memory.categories import ACTIVATIONS, OPTIMIZER_STATE, PARAMETERS, WORKSPACES
from profkit.analysis.memory.driver import CACHING_ALLOCATOR, OUTSIDE
from profkit.readers import open_trace
from profkit.readers.kineto.source_lines import SOURCE_PATH_ENV
from profkit.readers.snapshot import open_snapshot
from tests.conftest import _decompressed

CUDA = Path(__file__).parent / "data" / "memory" / "cuda"
SAMPLE_KERNELS = Path(__file__).parents[1] / "sample_kernels"
PLAIN, LEAK = CUDA / "gpt_memory.json.gz", CUDA / "gpt_memory_leak.json.gz"


def planted(name: str) -> dict:
    line = next(x for x in (CUDA / f"{name}.stdout").read_text().splitlines() if x.startswith("MEM_TRUTH "))
    return json.loads(line.split(" ", 1)[1])


def gpu_device(report: dict) -> dict:
    (gpu,) = [d for d in report["devices"] if d["device"] >= 0]
    return gpu


@pytest.fixture(scope="module")
def kineto() -> dict[str, dict]:
    """The reports of both traces, the program's source at hand (sample_kernels/, as the trace
    names its file): the Kineto reader finds call lines there."""
    out = {}
    with pytest.MonkeyPatch.context() as env:
        env.setenv(SOURCE_PATH_ENV, str(SAMPLE_KERNELS))
        for path in (PLAIN, LEAK):
            with open_trace(path) as trace:
                out[path.name.removesuffix(".json.gz")] = gpu_device(memory_report(trace))
    return out


@pytest.mark.parametrize("name", ["gpt_memory", "gpt_memory_leak"])
def test_each_steps_peaks_equal_the_allocators_own_to_the_byte(kineto: dict, name: str) -> None:
    truth, gpu = planted(name), kineto[name]
    assert [s["peak_allocated_bytes"] for s in gpu["steps"]] == truth["step_peak_allocated_bytes"]
    assert [s["peak_reserved_bytes"] for s in gpu["steps"]] == truth["step_peak_reserved_bytes"]
    assert gpu["growth"]["end_allocated_bytes"] == truth["step_allocated_at_end_bytes"]


@pytest.mark.parametrize("name", ["gpt_memory", "gpt_memory_leak"])
def test_what_holds_the_peak_adds_up_to_it(kineto: dict, name: str) -> None:
    """By phase, the parts add up to the peak; by site, nearly to the peak less what was allocated
    before the trace began (the parameters, optimizer state and the allocator's warm blocks, whose sites
    torch.profiler never saw)."""
    gpu = kineto[name]
    peak = gpu["peak"]["allocated_bytes"]
    assert peak == max(s["peak_allocated_bytes"] for s in gpu["steps"])
    assert sum(p["bytes"] for p in gpu["held_by_phase"]) == peak
    before = sum(p["bytes"] for p in gpu["held_by_phase"] if p["part"] == BEFORE_TRACE)
    assert before > planted(name)["parameter_bytes"] + planted(name)["optimizer_state_bytes"]
    # the table's top sites (10): all but a few 512-byte blocks of what the trace saw allocated
    sites = sum(s["bytes"] for s in gpu["held_by_site"])
    assert peak - before - 4096 <= sites <= peak - before


def test_the_planted_leak_grows_by_its_tensor_each_step(kineto: dict) -> None:
    truth, growth = planted("gpt_memory_leak"), kineto["gpt_memory_leak"]["growth"]
    assert growth["leaking"] and growth["growth_per_step_bytes"] == truth["leak_bytes_per_step"] == 262144
    (site,) = growth["sites"]
    assert site["bytes_per_step"] == truth["leak_bytes_per_step"]
    assert site["file"] == truth["leak_site"].split(":")[0] and truth["leak_function"] in site["function"]
    assert not kineto["gpt_memory"]["growth"]["leaking"]


def test_the_planted_leaks_line_is_found_in_the_kineto_trace(kineto: dict) -> None:
    """torch.profiler names main() by its line when recording began; the allocating call's line is
    the one line of main() that calls ``empty``, found in the source (the snapshot of the same run
    names it from its own stacks: test_the_planted_leak_and_its_line_from_the_snapshot)."""
    site = kineto["gpt_memory_leak"]["growth"]["sites"][0]
    assert f"{site['file']}:{site.get('line')}" == planted("gpt_memory_leak")["leak_site"]


def test_the_planted_leak_and_its_line_from_the_snapshot() -> None:
    """The snapshot of the leaking run holds torch.profiler's ProfilerStep#N annotations: its steps.
    The leak is named with the line that keeps the tensor (the allocation's own frame), and it
    grows by the tensor's size per step; each recorded step's peak is the allocator's own (MEM_TRUTH)
    up to its 512-byte rounding of the blocks."""
    truth = planted("gpt_memory_leak")
    with open_snapshot(_decompressed(CUDA / "gpt_memory_leak.pickle.xz")) as trace:
        report = memory_report(trace)
    gpu = gpu_device(report)
    assert report["steps_from"] == "profiler_step"
    growth = gpu["growth"]
    assert growth["leaking"] and growth["growth_per_step_bytes"] == truth["leak_bytes_per_step"]
    (site,) = growth["sites"]
    assert f"{Path(site['file']).name}:{site['line']}" == truth["leak_site"]
    assert site["bytes_per_step"] == truth["leak_bytes_per_step"] and site["function"] == truth["leak_function"]
    # ProfilerStep#2..7 are the steps the program measured (the profiler's wait and warm-up come first)
    peaks = [s["peak_allocated_bytes"] for s in gpu["steps"][2:8]]
    assert all(0 <= t - p < 4096 for t, p in zip(truth["step_peak_allocated_bytes"], peaks)), peaks


@pytest.mark.parametrize("name", ["gpt_memory", "gpt_memory_leak", "gpt_memory_nsys"])
def test_a_cuda_snapshots_peak_is_the_max_of_its_own_series(name: str) -> None:
    """The snapshot's own allocated series (its trace of alloc / free_completed, ending at the
    segments' active blocks) peaks where profkit says, to the byte; reserved at the dump is the
    segments' sizes; and it is the peak the program measured, up to the allocator's 512-byte rounding."""
    path = _decompressed(CUDA / f"{name}.pickle.xz")
    snap = pickle.loads(path.read_bytes())  # the test's own reading of a committed, trusted file
    events = [e for e in snap["device_traces"][0] if e["action"] in ("alloc", "free_completed")]
    change = np.array([e["size"] if e["action"] == "alloc" else -e["size"] for e in events], dtype=np.int64)
    at_dump = sum(b["size"] for s in snap["segments"] for b in s["blocks"]
                  if b["state"] in ("active_allocated", "active_pending_free"))
    allocated = at_dump - int(change.sum()) + np.cumsum(change)
    with open_snapshot(path) as trace:
        gpu = gpu_device(memory_report(trace))
    assert gpu["peak"]["allocated_bytes"] == int(allocated.max())
    assert gpu["at_dump"]["reserved_bytes"] == sum(s["total_size"] for s in snap["segments"])
    truth = planted(name)
    assert 0 <= max(truth["step_peak_allocated_bytes"]) - gpu["peak"]["allocated_bytes"] < 512 * len(events)
    assert gpu["peak"]["reserved_bytes"] == max(truth["step_peak_reserved_bytes"])


def test_the_oom_snapshot_names_the_failed_request_its_line_and_cause() -> None:
    truth = planted("gpt_oom")["oom"]
    with open_snapshot(_decompressed(CUDA / "gpt_oom.pickle.xz")) as trace:
        (oom,) = memory_report(trace)["oom"]
    assert oom["requested_bytes"] == truth["requested_bytes"]
    assert f"{Path(oom['file']).name}:{oom['line']}" == truth["site"] and oom["function"] == truth["function"]
    # the step: the optimizer steps the program completed before it (its own count), from the history
    assert oom["optimizer_steps_before"] == truth["step"] and oom["phase"] == "forward"
    assert oom["device_free_bytes"] == truth["device_free_bytes"]
    # the request (8 GiB) is more than the device had free and more than the allocator held unused
    assert oom["cause"] == "real use" and oom["requested_bytes"] > oom["cached_free_bytes"]
    assert oom["held_by_site"][0]["site"] == f"{truth['function']} ({truth['site']})"


NSYS = CUDA / "gpt_memory_nsys.sqlite.xz"


def _held_by_sql(path: Path) -> int:
    """The most device memory the process held, from the export's own rows: the running sum of
    device allocations (kinds Device, Array, Device Static) minus frees, at its highest."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        (held,) = db.execute("""
            WITH kinds AS (SELECT id FROM ENUM_CUDA_MEM_KIND WHERE label IN ('Device', 'Array', 'Device Static')),
                 ops AS (SELECT id, label FROM ENUM_CUDA_DEV_MEM_EVENT_OPER),
                 signed AS (SELECT e.start, e.rowid AS r,
                                   CASE o.label WHEN 'Allocation' THEN e.bytes ELSE -e.bytes END AS change
                            FROM CUDA_GPU_MEMORY_USAGE_EVENTS e JOIN ops o ON o.id = e.memoryOperationType
                            WHERE e.memKind IN (SELECT id FROM kinds))
            SELECT max(total) FROM (SELECT sum(change) OVER (ORDER BY start, r) AS total FROM signed)""").fetchone()
    return int(held)


def _snapshot_segments(path: Path) -> set[tuple[int, int]]:
    snap = pickle.loads(path.read_bytes())  # the test's own reading of a committed, trusted file
    found = {(s["address"], s["total_size"]) for s in snap["segments"]}
    found |= {(e["addr"], e["size"]) for e in snap["device_traces"][0] if e["action"] == "segment_alloc"}
    return found


def test_nsys_cuda_memory_usage_peak_is_the_exports_own() -> None:
    """nsys --cuda-memory-usage records the driver's allocations: profkit's peak of the device memory
    held equals the export's own running sum, and says no allocated bytes it cannot know."""
    path = _decompressed(NSYS)
    with open_trace(path) as trace:
        gpu = gpu_device(memory_report(trace))
    assert gpu["level"] == "driver" and gpu["peak"]["allocated_bytes"] is None
    assert gpu["peak"]["reserved_bytes"] == _held_by_sql(path) == max(s["peak_reserved_bytes"] for s in gpu["steps"])
    assert sum(p["bytes"] for p in gpu["held_by_category"]) == gpu["peak"]["reserved_bytes"]


def test_nsys_device_memory_split_by_the_snapshots_segments() -> None:
    """Issue 33 asks the nsys capture's reserved peak to agree with the snapshot's within 1%.  It does
    not: nsys saw the process hold 212.9 MiB, PyTorch reserved 84 MiB.  The rest is allocations made
    outside the caching allocator (on this run two 64 MiB + 128 KiB + 1 KiB sets, one per thread
    that ran a GEMM, at addresses no snapshot segment has) and the kernel modules' __device__
    variables.  What agrees, to the byte, is the part of nsys's allocations at the snapshot's
    segment addresses: that is the allocator's reserved peak the program measured."""
    truth = planted("gpt_memory_nsys")
    pickle_path = _decompressed(CUDA / "gpt_memory_nsys.pickle.xz")
    with open_trace(_decompressed(NSYS)) as trace, open_snapshot(pickle_path) as snap:
        gpu = gpu_device(memory_report(trace, snapshot=snap))
    parts = {p["category"]: p["bytes"] for p in gpu["held_by_category"]}
    assert parts[CACHING_ALLOCATOR] == max(truth["step_peak_reserved_bytes"])
    assert parts[CACHING_ALLOCATOR] == sum(n for _, n in _snapshot_segments(pickle_path))
    assert sum(parts.values()) == gpu["peak"]["reserved_bytes"]
    assert parts[OUTSIDE] > parts[CACHING_ALLOCATOR]  # the 1% rule fails for the whole process, by design
    with open_trace(_decompressed(NSYS)) as trace:  # no snapshot: not split, and it says so
        alone = gpu_device(memory_report(trace))
    assert CACHING_ALLOCATOR not in {p["category"] for p in alone["held_by_category"]}


@pytest.mark.parametrize("name", ["gpt_memory", "gpt_memory_leak", "gpt_memory_nsys"])
def test_snapshot_categories_are_the_models_and_optimizers_bytes(name: str) -> None:
    """What holds the peak, told from each block's allocation stack: the parameters are the model's
    bytes (numel x element size, MEM_TRUTH), AdamW's state on the GPU is exp_avg + exp_avg_sq, twice
    the parameters (its per-parameter `step` counters live on the CPU, 4 B each: the rest of the
    truth's optimizer bytes), and the categories add up to the peak."""
    truth = planted(name)
    with open_snapshot(_decompressed(CUDA / f"{name}.pickle.xz")) as trace:
        gpu = gpu_device(memory_report(trace))
    parts = {p["category"]: p["bytes"] for p in gpu["held_by_category"]}
    assert parts[PARAMETERS] == truth["parameter_bytes"]
    assert parts[OPTIMIZER_STATE] == 2 * truth["parameter_bytes"]
    cpu_counters = truth["optimizer_state_bytes"] - parts[OPTIMIZER_STATE]
    assert 0 < cpu_counters < 4 * 1000 and cpu_counters % 4 == 0
    assert sum(parts.values()) == gpu["peak"]["allocated_bytes"]
    assert parts[WORKSPACES] >= 32 << 20  # a cuBLAS workspace (setWorkspaceForHandle) per GEMM stream


def test_kineto_categories_add_up_to_the_peak(kineto: dict) -> None:
    for gpu in kineto.values():
        assert sum(p["bytes"] for p in gpu["held_by_category"]) == gpu["peak"]["allocated_bytes"]
        kinds = {p["category"] for p in gpu["held_by_category"]}
        assert ACTIVATIONS in kinds and BEFORE_TRACE in kinds


def test_history_keeps_nsys_device_memory_as_held_never_as_allocated() -> None:
    from profkit.history import memory_summary

    path = _decompressed(NSYS)
    with open_trace(path) as trace:
        stored = memory_summary(trace)
    assert stored["peak_allocated_bytes"] is None and stored["peak_reserved_bytes"] == _held_by_sql(path)
