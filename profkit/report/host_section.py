"""The report's Host section and its verdict, from ``profkit.analysis.host`` (traces with Python stacks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profkit.analysis.host import host_time
from profkit.analysis.host.verdict import idle_text, verdict
from profkit.model import Trace
from profkit.output import Column
from profkit.report.model import Section, Table
from profkit.report.text import duration

HOST_COLUMNS = [
    Column("function", "Function"), Column("site", "File:line"),
    Column("self_ns_per_step", "Self per step (ns)", "ns"),
    Column("inclusive_ns_per_step", "Inclusive per step (ns)", "ns"),
    Column("gpu_idle_ns_per_step", "GPU idle per step (ns)", "ns"),
]


def fill_host(section: Section, trace: Trace, top: int, found: dict[str, Any]) -> None:
    """Host time per Python function per steady-state step, the GPU-idle part, and the verdict."""
    result = host_time(trace, steady_only=True)
    said = verdict(trace, result)
    found["host_verdict"] = said
    s = result.summary
    section.data = {**result.to_dict(), "verdict": said}
    section.intro = ("Where the host's time goes in a steady-state step: each instant counts for the innermost "
                     "Python frame open on the main thread; GPU idle is the step minus all GPU work "
                     "(as in Steps).")
    section.facts = [
        ("Verdict", said["sentence"]),
        ("Source", "torch.profiler Python stacks" if s["source"] == "kineto_stacks" else "nsys Python sampling"),
        ("GPU idle", f"{idle_text(s, said['idle_pct']).removeprefix('GPU idle ')}; median step "
                     f"{duration(s['step_median_ns'])}"),
    ]
    rows = [{**r, "site": f"{Path(r['file']).name}:{r['line']}"} for r in result.functions[:top]]
    section.tables.append(Table("host", "Python functions (main thread)", HOST_COLUMNS, rows, label_key="function"))
    if result.other_threads:
        others = [{**r, "site": f"{Path(r['file']).name}:{r['line']}"} for r in result.other_threads[:top]]
        section.tables.append(Table("host_other", "Other threads",
                                    [Column("tid", "Thread", "int"), *HOST_COLUMNS], others, label_key="function"))


def host_finding(found: dict[str, Any]) -> list[str]:
    """The verdict, first: what bounds the step, in plain words."""
    said = found.get("host_verdict")
    return [said["sentence"]] if said else []
