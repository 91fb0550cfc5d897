"""Device work a trace records and profkit does not read, and what it is.

The Kineto reader counts such events per category (``TraceMeta.extra["unread_device_events"]``):
another accelerator's work (MTIA, XPU), or kernels under CUPTI's range profiler.  A trace with
them is no CPU-only one; the commands name them instead of reporting empty GPU figures as the truth.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# device-work categories profkit does not read that are not another accelerator's: what they are
UNTIMED_DEVICE_WORK = {
    # torch.profiler with experimental_config(profiler_metrics=...): CUPTI's range profiler replays
    # each kernel to count its metrics, and records the replay, not the kernel's run
    "cuda_profiler_range": "kernels measured by CUPTI's range profiler, whose durations are the profiler's "
                           "replays, not the kernels' runs",
}


def describe_unread(categories: Iterable[str], counts: Mapping[str, int] | None = None) -> str:
    """What unread device work is, for a sentence: "another accelerator's work (mtia_runtime)", or
    with ``counts`` "... (25,814 mtia_ccp_events events)"."""
    def named(cats: list[str]) -> str:
        return ", ".join(f"{counts[c]:,} {c} events" if counts else c for c in cats)

    categories = sorted(categories)
    parts = [f"{UNTIMED_DEVICE_WORK[c]} ({named([c])})" for c in categories if c in UNTIMED_DEVICE_WORK]
    other = [c for c in categories if c not in UNTIMED_DEVICE_WORK]
    if other:
        parts.append(f"another accelerator's work ({named(other)})")
    return "; ".join(parts)
