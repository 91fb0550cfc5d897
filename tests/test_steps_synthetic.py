"""The step finder on hand-built (synthetic) launch sequences: shapes a capture
does not give on demand.  Each test knows where its iterations begin because
it built them; real captures are tested in test_steps.py."""

from __future__ import annotations

import random

import pytest

from profkit.analysis.steps import KERNEL_PATTERN, NVTX, PROFILER_STEP, find_steps, is_library_range
from profkit.errors import ProfkitError
from tests.synthetic_trace import loop, synthetic_trace

FWD = ["embedding", "gemm_a", "gelu", "gemm_b", "softmax_xent"]
BWD = ["softmax_xent_bw", "gemm_b_dgrad", "gemm_b_wgrad", "gelu_bw", "gemm_a_dgrad", "gemm_a_wgrad", "embedding_bw"]
OPT = ["adam_multi_tensor", "adam_step_count"]
STEP = FWD + BWD + OPT


def starts(result) -> list[int]:
    return result.steps["start_ns"].tolist()


def test_synthetic_regular_loop_after_startup_kernels():
    kernels, spans = loop([["normal_init", "fill", "copy"]] + [STEP] * 12)
    result = find_steps(synthetic_trace(kernels))
    assert result.source == KERNEL_PATTERN
    assert starts(result) == [s for s, _ in spans[1:]]
    assert result.summary["count"] == 12
    assert result.startup == (kernels[0][1] - 5_000, spans[1][0])  # from the first launch to the first step
    # steps tile the loop: each ends where the next starts; the last at its last kernel's end
    assert result.steps["end_ns"].tolist() == [s for s, _ in spans[2:]] + [spans[-1][1]]


def test_synthetic_irregular_steps():
    """Gaps between iterations and kernel lengths vary from step to step; the boundaries do not move."""
    rng = random.Random(7)
    n = 15
    gaps = [rng.randrange(5_000, 400_000) for _ in range(n)]
    lengths = [rng.randrange(2_000, 30_000) for _ in range(n)]
    kernels, spans = loop([STEP] * n, step_gaps=gaps, kernel_ns_per_step=lengths)
    result = find_steps(synthetic_trace(kernels))
    assert result.source == KERNEL_PATTERN
    assert starts(result) == [s for s, _ in spans]
    durations = result.steps["duration_ns"].tolist()
    assert durations[:-1] == [spans[i + 1][0] - spans[i][0] for i in range(n - 1)]


def test_synthetic_eval_pass_joins_the_step_before():
    """Every 4th step is followed by an eval pass (a forward, no backward or optimizer):
    not a step of its own; the step it follows is longer by it."""
    seq, eval_after = [], {3, 7, 11}
    for i in range(14):
        seq.append(STEP)
        if i in eval_after:
            seq.append(FWD + ["accuracy"])
    kernels, spans = loop(seq)
    result = find_steps(synthetic_trace(kernels))
    assert result.source == KERNEL_PATTERN
    assert result.summary["count"] == 14
    train_spans = [sp for sp, names in zip(spans, seq) if names is STEP]
    assert starts(result) == [s for s, _ in train_spans]
    d = result.steps.set_index("index")["duration_ns"]
    assert d[3] > 1.3 * d[2] and d[7] > 1.3 * d[6]
    assert result.summary["median_ns"] == pytest.approx(d[1])


def test_synthetic_transformer_layers_are_not_steps():
    """Twelve identical layers repeat inside every step: the step is the whole iteration."""
    layer_fwd = ["ln", "qkv_gemm", "flash_fwd", "proj_gemm", "ln", "mlp_gemm_up", "gelu", "mlp_gemm_down"]
    layer_bwd = ["mlp_down_bw", "gelu_bw", "mlp_up_bw", "ln_bw", "proj_bw", "flash_bw", "qkv_bw", "ln_bw"]
    step = ["embedding"] + layer_fwd * 12 + ["lm_head", "xent"] + ["xent_bw", "lm_head_bw"] + layer_bwd * 12 + \
        ["embedding_bw", "adam"]
    kernels, spans = loop([step] * 6)
    result = find_steps(synthetic_trace(kernels))
    assert result.summary["count"] == 6
    assert starts(result) == [s for s, _ in spans]
    assert result.evidence["period_launches"] == len(step)


def test_synthetic_warmup_step_with_autotuning_is_warmup():
    """The first step also benchmarks candidate kernels when its backward is compiled
    (autotuning): a warm-up step, out of the summary."""
    first = FWD + ["triton_bench_a"] * 20 + ["triton_bench_b"] * 20 + BWD + OPT
    kernels, spans = loop([first] + [STEP] * 9)
    result = find_steps(synthetic_trace(kernels))
    assert result.steps["phase"].tolist() == ["warmup"] + ["steady"] * 8 + ["teardown"]  # the last: cut off
    assert result.summary["steady_count"] == 8
    assert result.steady_window == (spans[1][0], spans[-1][0])  # the last steady step ends where the cut one starts


def test_synthetic_forward_backward_without_optimizer_is_startup():
    """Three warm-up passes (forward and backward, no optimizer) before the loop are not steps."""
    kernels, spans = loop([FWD + BWD] * 3 + [STEP] * 8)
    result = find_steps(synthetic_trace(kernels))
    assert result.summary["count"] == 8
    assert starts(result)[0] == spans[3][0]


def test_synthetic_single_step_range():
    kernels, spans = loop([["init"], STEP])
    trace = synthetic_trace(kernels, ranges=[("train_step", spans[1][0] - 10_000, spans[1][1])])
    result = find_steps(trace)
    assert result.source == NVTX
    assert result.summary["count"] == 1 and result.summary["steady_count"] == 1
    # the range opens 10 us before its first kernel with the GPU idle: the step owns that time
    assert starts(result) == [spans[1][0] - 10_000]


def test_synthetic_single_iteration_without_ranges_says_so():
    kernels, _ = loop([STEP])
    result = find_steps(synthetic_trace(kernels))
    assert result.source is None and not result.found
    assert "no repeating pattern" in result.message
    assert result.to_dict()["steps"] == [] and result.to_dict()["summary"]["count"] == 0


def test_synthetic_no_repetition_at_all_says_so():
    rng = random.Random(1)
    names = [f"kernel_{i}" for i in range(200)]
    rng.shuffle(names)
    kernels, _ = loop([names])
    result = find_steps(synthetic_trace(kernels))
    assert result.source is None
    assert "no repeating pattern" in result.message and "200 GPU operations" in result.message


@pytest.mark.parametrize("library", ["CCCL:cub::DeviceRadixSortKernel", "NCCL:ncclAllReduce", "aten::mm",
                                     "Optimizer.step#AdamW.step", "cublasGemmEx", "c10d::allreduce_"])
def test_synthetic_library_ranges_are_never_steps(library):
    """A library's range repeats once per step around some kernels: still not a step."""
    kernels, spans = loop([STEP] * 6)
    lib = [(library, s + 1_000, s + 30_000) for s, _ in spans]
    result = find_steps(synthetic_trace(kernels, ranges=lib))
    assert result.source == KERNEL_PATTERN
    assert result.summary["count"] == 6


def test_synthetic_library_domains_and_sync_sites():
    assert is_library_range("ncclAllReduce", domain="NCCL")
    assert is_library_range("DeviceRadixSort", domain="CCCL")
    assert is_library_range("profkit.sync|item|train.py:59|print(loss.item())", kind="sync_site")
    assert not is_library_range("step", domain="samples")
    assert not is_library_range("train_step")


def test_synthetic_user_range_beats_inner_ranges():
    """"step" contains "forward" and "backward" ranges that repeat as often: the outer loop is the step."""
    kernels, spans = loop([["init"]] + [STEP] * 5)
    ranges = []
    for s, e in spans[1:]:
        ranges += [("step", s - 10_000, e), ("forward", s - 9_000, s + 40_000), ("backward", s + 40_000, e - 30_000)]
    result = find_steps(synthetic_trace(kernels, ranges=ranges))
    assert (result.source, result.name) == (NVTX, "step")
    assert result.summary["count"] == 5


def test_synthetic_profiler_step_ranges():
    kernels, spans = loop([STEP] * 4)
    ranges = [(f"ProfilerStep#{i + 7}", s - 20_000, (spans[i + 1][0] - 20_000) if i + 1 < 4 else e + 1)
              for i, (s, e) in enumerate(spans)]
    result = find_steps(synthetic_trace(kernels, ranges=ranges, range_kind="profiler_step"))
    assert result.source == PROFILER_STEP
    # each range opens 20 us before its first kernel, the GPU idle since the step before: from there
    assert starts(result) == [s - 20_000 for s, _ in spans]


def test_synthetic_named_step_range_and_a_wrong_name():
    kernels, spans = loop([STEP] * 4)
    ranges = [(f"iteration {i}", s - 1_000, e) for i, (s, e) in enumerate(spans)]
    trace = synthetic_trace(kernels, ranges=ranges)
    assert find_steps(trace, step_range="iteration").summary["count"] == 4
    with pytest.raises(ProfkitError, match="no range named 'epoch'"):
        find_steps(trace, step_range="epoch")
    assert find_steps(trace, use_ranges=False).source == KERNEL_PATTERN


def test_synthetic_one_kernel_over_and_over_is_not_a_loop():
    """One name launched 500 times (with a copy now and then) has no loop body to call a step."""
    rng = random.Random(3)
    names = ["k" if rng.random() < 0.8 else "memcpy" for _ in range(500)]
    kernels, _ = loop([names])
    result = find_steps(synthetic_trace(kernels))
    assert result.source is None and "no repeating pattern" in result.message
