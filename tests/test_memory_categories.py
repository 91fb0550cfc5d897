"""What a block alive at the peak is (``profkit.analysis.memory.categories``), and the nsys
``--cuda-memory-usage`` reader on exports that are not real captures.

The stacks and event sequences here are hand-written cases of the rules (each names the rule it
checks); the real captures' figures are tested against their programs' own numbers in
``tests/test_memory_gpu.py``.  The SQLite files built here are bad-input cases, named as such.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profkit.analysis.memory import memory_report
from profkit.analysis.memory.categories import (
    ACTIVATIONS,
    GRADIENTS,
    HELD_TO_END,
    OPTIMIZER_STATE,
    PARAMETERS,
    PROGRAM,
    TEMPORARIES,
    WORKSPACES,
    block_categories,
    context_origins,
    free_positions,
    stack_origin,
)
from profkit.readers import open_trace
from tests.conftest import _decompressed

TORCH = "/venv/lib/python3.12/site-packages/torch"


def py(function: str, file: str, line: int = 10) -> str:
    return f"{function} {file}:{line}"


@pytest.mark.parametrize("frames, origin", [
    ([py("convert", f"{TORCH}/nn/modules/module.py"), py("_apply", f"{TORCH}/nn/modules/module.py"),
      py("main", "/work/train.py")], "parameter"),
    ([py("__init__", f"{TORCH}/nn/modules/linear.py"), py("__init__", "/work/model.py")], "parameter"),
    ([py("_init_group", f"{TORCH}/optim/adam.py"), py("step", f"{TORCH}/optim/adam.py")], "optimizer init"),
    ([py("_multi_tensor_adam", f"{TORCH}/optim/adam.py")], "optimizer"),
    (["at::cuda::setWorkspaceForHandle(cublasContext*, c10::cuda::CUDAStream)",
      py("forward", f"{TORCH}/nn/modules/linear.py"), py("_call_impl", f"{TORCH}/nn/modules/module.py")], "workspace"),
    (["torch::autograd::generated::details::mm_mat2_backward(...)",
      "torch::autograd::python::PythonEngine::thread_init(int, ...)"], "backward"),
    ([py("_make_grads", f"{TORCH}/autograd/__init__.py"), py("main", "/work/train.py")], "backward"),
    ([py("forward", "/work/model.py"), py("_call_impl", f"{TORCH}/nn/modules/module.py"),
      py("main", "/work/train.py")], "forward"),
    ([py("main", "/work/train.py"), py("<module>", "/work/train.py")], "other"),
    ([py("f", "/work dir/with space.py")], "other"),
    ([], "other"),
])
def test_an_allocations_origin_comes_from_its_own_stack(frames: list[str], origin: str) -> None:
    assert stack_origin("\n".join(frames)) == origin


def categorize(origins: list[str], sizes: list[int], addrs: list[int]) -> list[str]:
    size, addr = np.array(sizes), np.array(addrs)
    alloc = np.flatnonzero(size > 0)
    return list(block_categories(np.array(origins, dtype=object), size, free_positions(addr, size), alloc))


def test_a_blocks_lifetime_tells_an_activation_from_a_temporary_and_a_gradient() -> None:
    """forward: a (kept for the backward), b (freed within the forward); backward: g (kept past it),
    t (freed within it); then the program's own allocation ends the backward's run."""
    origins = ["forward", "forward", "", "backward", "backward", "", "", "other"]
    sizes = [100, 10, -10, 50, 5, -5, -100, 7]
    addrs = [1, 2, 2, 3, 4, 4, 1, 5]
    assert categorize(origins, sizes, addrs) == [ACTIVATIONS, TEMPORARIES, GRADIENTS, TEMPORARIES, PROGRAM]


def test_a_forward_block_never_freed_is_no_activation() -> None:
    origins = ["forward", "backward", "", "other"]
    assert categorize(origins, [100, 5, -5, 1], [1, 2, 2, 3])[0] == HELD_TO_END


def test_an_optimizer_block_kept_past_the_step_is_its_state() -> None:
    """SGD's momentum buffers are made in the step itself, not in _init_group: kept, they are state;
    a temporary of the step is freed before it ends."""
    origins = ["optimizer", "optimizer", "", "forward", "optimizer init", "parameter", "workspace"]
    sizes = [8, 4, -4, 3, 2, 1, 6]
    addrs = [1, 2, 2, 3, 4, 5, 6]
    assert categorize(origins, sizes, addrs) == [OPTIMIZER_STATE, TEMPORARIES, HELD_TO_END,
                                                 OPTIMIZER_STATE, PARAMETERS, WORKSPACES]


def test_free_positions_pair_each_block_with_the_next_free_of_its_address() -> None:
    size = np.array([10, -10, 20, 30, -20, -30, 40])
    addr = np.array([1, 1, 1, 2, 1, 2, 1])
    assert free_positions(addr, size).tolist() == [1, -1, 4, 5, -1, -1, 7]


def test_without_a_stack_the_origin_is_what_was_open_on_the_thread() -> None:
    ops = pd.DataFrame({"start": [0, 100, 300], "end": [50, 200, 400], "tid": [1, 2, 1],
                        "name": ["nn.Module: Linear_0", "autograd::engine::evaluate_function: MmBackward0",
                                 "aten::add_"]})
    ranges = pd.DataFrame({"start": [290], "end": [500], "name": ["Optimizer.step#AdamW.step"]})
    frames = pd.DataFrame({"start": [310], "end": [320], "tid": [1], "function": ["_init_group"],
                           "file": [f"{TORCH}/optim/adam.py"]})
    t = np.array([10, 150, 150, 350, 315, 60])
    tid = np.array([1, 2, 1, 1, 1, 1])
    assert context_origins(t, tid, ranges, ops, frames).tolist() == [
        "forward", "backward", "other", "optimizer", "optimizer init", "other"]


# -- nsys --cuda-memory-usage: hand-built exports (bad-input and edge cases, not captures) ---------

def _export(tmp_path: Path, rows: list[tuple[int, int, int, int, int]]) -> Path:
    """A copy of the real capture with its memory rows replaced by ``rows`` (start, address, bytes,
    memKind, memoryOperationType): every other table stays nsys's own."""
    path = tmp_path / "handbuilt_memory.sqlite"
    path.write_bytes(_decompressed(Path(__file__).parent / "data/memory/cuda/gpt_memory_nsys.sqlite.xz").read_bytes())
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM CUDA_GPU_MEMORY_USAGE_EVENTS")
        db.executemany("INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS (start, globalPid, deviceId, contextId, address, pc, "
                       "bytes, memKind, memoryOperationType, correlationId) VALUES (?, 0, 0, 1, ?, 0, ?, ?, ?, 0)", rows)
    return path


def test_frees_of_blocks_made_before_the_capture_never_take_the_total_below_zero(tmp_path: Path) -> None:
    path = _export(tmp_path, [(6_500_000_000, 111, 4096, 2, 1),     # a free of something never seen
                              (6_500_000_001, 222, 1 << 20, 2, 0),
                              (6_500_000_002, 333, 64, 1, 0),       # pinned host memory: not the GPU's
                              (6_500_000_003, 222, 0, 2, 1)])       # its free, with no size given
    with open_trace(path) as trace:
        memory = trace.table("memory")
        assert memory["bytes"].tolist() == [1 << 20, -(1 << 20)]
        assert memory["total_reserved"].tolist() == [1 << 20, 0]
        assert trace.meta.extra["skipped_events"] == {"memory frees before the capture": 1}
        (gpu,) = memory_report(trace)["devices"]
    assert gpu["peak"]["reserved_bytes"] == 1 << 20


def test_an_export_without_memory_rows_is_one_line(tmp_path: Path) -> None:
    path = _export(tmp_path, [])
    result = subprocess.run([sys.executable, "-m", "profkit", "memory", str(path)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and "no allocator events" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_reader_finds_the_snapshot_the_launcher_names(tmp_path: Path) -> None:
    """profkit trace --memory's launcher names its exit snapshot; the reader looks for that name."""
    from profkit.capture.launch import MEMORY_SNAPSHOT, snapshot_name
    from profkit.readers.snapshot import same_run_snapshot

    trace = tmp_path / "trace.sqlite"
    assert same_run_snapshot(trace, None) is None
    for rank in (None, 1):
        (tmp_path / snapshot_name(MEMORY_SNAPSHOT, None if rank is None else str(rank))).write_bytes(b"")
        assert same_run_snapshot(trace, rank) == tmp_path / snapshot_name(MEMORY_SNAPSHOT,
                                                                          None if rank is None else str(rank))


def test_an_impossible_size_is_no_allocation(tmp_path: Path) -> None:
    path = _export(tmp_path, [(6_500_000_000, 111, 1 << 62, 2, 0), (6_500_000_001, 222, 4096, 2, 0),
                              (6_500_000_002, 333, 1 << 62, 2, 0)])
    with open_trace(path) as trace:
        assert trace.table("memory")["total_reserved"].tolist() == [4096]
