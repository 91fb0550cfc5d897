"""Every committed capture a command can read, by a short id: the nsys exports (xz-compressed,
unpacked on first use), the Kineto traces, each rank's file of the DDP jobs and the whole-job
export, the ROCm trace and the public HTA traces."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import DATA, _decompressed

# Small enough for the default run; the rest run with -m slow (see conftest.default_run).
FAST_CAPTURES = frozenset({"nsys/nsys2023_nvtx", "nsys/nsys2023_sync_apis", "nsys/nsys2025_nvtx",
                           "nsys/nsys2025_sync", "nsys/nsys2025_train_print", "kineto/mlp_print",
                           "kineto/mlp_annotated", "hta_zoo/alexnet", "hta_zoo/triton_example",
                           "hta_zoo/sampled_rank-0", "hta_zoo/sampled_rank-1",
                           "hta_rocm/mi250_minitoy_train_ROCm6_2_kineto"})
# Exports that are broken on purpose (tests/test_bad_input.py reads them), and traces of an accelerator
# profkit does not read (tests/data/hta_other: its commands refuse them): no invariant applies.
BROKEN = frozenset({"nsys/nsys2025_bad", "hta_other/mtia_inference_rank_0", "hta_other/cupti_range_profiler"})


def capture_id(path: Path) -> str:
    relative = path.relative_to(DATA).as_posix()
    for suffix in (".sqlite.xz", ".json.gz"):
        relative = relative.removesuffix(suffix)
    return relative


def committed_captures() -> dict[str, Path]:
    """id -> packed path of every committed trace (nsys exports still .xz)."""
    found = sorted([*DATA.rglob("*.sqlite.xz"), *DATA.rglob("*.json.gz")])
    return {capture_id(path): path for path in found if capture_id(path) not in BROKEN}


def readable(path: Path) -> Path:
    """The path a command reads: an nsys export unpacked beside its .xz (once)."""
    return _decompressed(path) if path.name.endswith(".xz") else path
