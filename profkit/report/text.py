"""Small formatting helpers shared by the report's findings, figures and renderers."""

from __future__ import annotations

from profkit.output import human_bytes


def duration(ns: float | None) -> str:
    """A duration for people: "1.23 ms", "845 ns"."""
    if ns is None:
        return ""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.0f} ns"


def percent(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}%"


def size(nbytes: float | None) -> str:
    return "" if nbytes is None else human_bytes(nbytes)


def size_or_unknown(nbytes: float | None) -> str:
    """``size``, or "size unknown" where the trace did not record it (a ROCm copy)."""
    return "size unknown" if nbytes is None else human_bytes(nbytes)


def short_kernel_name(name: str | None, limit: int = 80) -> str:
    """A kernel name cut for a sentence: the part before the argument list,
    then the template arguments shortened ("void f<...>")."""
    if not name:
        return ""
    head = name
    depth = 0
    for i, ch in enumerate(name):  # cut at the "(" that opens the parameter list
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0 and i > 0:
            head = name[:i]
            break
    if len(head) > limit and "<" in head:
        head = head[: head.index("<")] + "<...>"
    if len(head) > limit:
        head = head[: limit - 1] + "…"
    return head


# What a thread did during a GPU idle gap (``analysis.breakdown.idle``): kind -> label.
# The API calls' label is the trace's platform (TraceMeta.gpu_platform): "CUDA", or "HIP".
CPU_ACTIVITY_LABELS = (("ranges", "ranges"), ("api", "CUDA"), ("cpu_ops", "ops"), ("osrt", "OS"))


def cpu_activity(gap: dict, per_kind: int = 2, platform: str | None = None) -> str:
    """"ranges: train_step 4.2 ms; CUDA: cudaStreamSynchronize 4.1 ms; OS: pthread_cond_wait 4.1 ms, write 0.2 ms"
    from a gap's lists of {name, overlap_ns} (the time each spent inside the gap); ``platform``
    labels the API calls ("HIP: hipLaunchKernel 6.5 ms" on a ROCm trace); without it, HIP
    where every call is a hip* one, else CUDA."""
    if platform is None:
        calls = gap.get("api") or []
        platform = "HIP" if calls and all(c["name"].startswith("hip") for c in calls) else "CUDA"
    parts = []
    for key, label in CPU_ACTIVITY_LABELS:
        label = platform if key == "api" else label
        items = (gap.get(key) or [])[:per_kind]
        if items:
            parts.append(f"{label}: " + ", ".join(f"{i['name']} {duration(i['overlap_ns'])}" for i in items))
    return "; ".join(parts)
