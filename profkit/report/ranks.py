"""The cross-rank report: ``Report`` data for several ranks of one job.

Built from ``profkit.analysis.ranks.cross_rank.cross_rank`` (plain data) and rendered by
the same HTML/Markdown/JSON renderers as the single-trace report.
"""

from __future__ import annotations

from pathlib import Path
from datetime import datetime, timezone
from typing import Any

from profkit._version import __version__
from profkit.analysis.ranks.cross_rank import STRAGGLER_MIN_WAIT
from profkit.output import Column
from profkit.report.model import Figure, Report, Section, Table
from profkit.report.text import duration, percent, size

RANK_TABLE_COLUMNS = [
    Column("rank", "Rank", "int"),
    Column("straggler", "Straggler"),
    Column("wait_per_step_ns", "Waits for it / step (ns)", "ns"),
    Column("steps", "Steps", "int"),
    Column("step_median_ns", "Step median (ns)", "ns"),
    Column("compute_per_step_ns", "Compute kernels / step (ns)", "ns"),
    Column("comm_per_step_ns", "Comm kernels / step (ns)", "ns"),
    Column("kernel_ns", "Kernel time (ns)", "ns"),
    Column("compute_kernel_ns", "Compute kernels (ns)", "ns"),
    Column("comm_kernel_ns", "Comm kernels (ns)", "ns"),
    Column("memory_ns", "Memory (ns)", "ns"),
    Column("idle_ns", "Idle (ns)", "ns"),
    Column("comm_comp_overlap_pct", "Overlap %", "pct"),
    Column("rank_source", "Rank from"),
    Column("file", "File"),
]
COLLECTIVE_COLUMNS = [
    Column("collective", "Collective"),
    Column("ranks", "Ranks", "int"),
    Column("count", "Kernels", "int"),
    Column("total_ns", "Total (ns)", "ns"),
    Column("min_rank_total_ns", "Min rank (ns)", "ns"),
    Column("median_rank_total_ns", "Median rank (ns)", "ns"),
    Column("max_rank_total_ns", "Max rank (ns)", "ns"),
    Column("skew_pct", "Skew %", "pct"),
    Column("message_size", "Message size (min / median / max)"),
    Column("bytes_per_rank", "Bytes / rank", "bytes"),
    Column("algbw_gbps", "algbw (GB/s)", "float"),
    Column("busbw_gbps", "busbw (GB/s)", "float"),
]
SIZE_COLUMNS = [
    Column("collective", "Collective"),
    Column("message_size", "Message size"),
    Column("count", "Calls", "int"),
    Column("median_ns", "Median call (ns)", "ns"),
    Column("algbw_gbps", "algbw (GB/s)", "float"),
    Column("busbw_gbps", "busbw (GB/s)", "float"),
]
SKEW_COLUMNS = [
    Column("name", "Kernel"),
    Column("min_ns", "Fastest rank (ns)", "ns"),
    Column("max_ns", "Slowest rank (ns)", "ns"),
    Column("spread_pct", "Spread %", "pct"),
    Column("slowest_rank", "Slowest rank", "int"),
]
FAILED_COLUMNS = [Column("file", "File"), Column("error", "Why it was not read")]


def build_ranks_report(job: dict[str, Any], summaries: list[dict[str, Any]], top: int = 20) -> Report:
    """A ``Report`` for the output of ``cross_rank`` (and the per-rank summaries it came from)."""
    sections = [_ranks_section(job), _steps_section(job), _breakdown_section(summaries),
                _collectives_section(job, summaries), _skew_section(job, top)]
    if job["failed"]:
        sections.insert(0, Section("failed", "Ranks not read", tables=[
            Table("failed", "Rank files that could not be read", FAILED_COLUMNS, job["failed"])]))
    files = [r["file"] for r in job["ranks"]]
    return Report(
        title=f"profkit report: {len(job['ranks'])} ranks",
        # a whole-job export is every rank's file: named once
        export_name=", ".join(dict.fromkeys(f.rsplit("/", 1)[-1] for f in files)),
        generated_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        profkit_version=__version__, partial=job["partial"],
        partial_reason=f"{len(job['failed'])} rank file(s) could not be read" if job["partial"] else None,
        run_info=None, findings=ranks_findings(job), capture={"ranks": len(job["ranks"])},
        sections=sections, top=top)


def ranks_findings(job: dict[str, Any]) -> list[str]:
    items = []
    ranks = job["ranks"]
    medians = [r["step_median_ns"] for r in ranks if r.get("step_median_ns") is not None]
    if medians:
        items.append(f"{len(ranks)} ranks; step median from {duration(min(medians))} to {duration(max(medians))}.")
    sentence = straggler_sentence(job["straggler"], len(ranks))
    if sentence:
        items.append(sentence)
    for c in job["collectives"][:3]:
        moved = ""
        if c.get("msg_bytes_min") is not None:
            moved = f"; messages {message_size(c)}, {size(c['bytes_per_rank'])} per rank"
            if c.get("busbw_gbps") is not None:
                least = "" if c.get("bandwidth_paired") else "at least "
                moved += f", bus bandwidth {least}{c['busbw_gbps']:.1f} GB/s"
                largest = (c.get("by_size") or [{}])[-1]
                if len(c.get("by_size") or []) > 1 and largest.get("busbw_gbps") is not None:
                    moved += (f" ({largest['busbw_gbps']:.1f} GB/s for the largest, "
                              f"{size(largest['msg_bytes_min'])}{'' if largest['exact'] else ' and up'})")
        items.append(f"{c['collective']}: {c['count']:,} kernels, {duration(c['total_ns'])} in all; per-rank "
                     f"total from {duration(c['min_rank_total_ns'])} to {duration(c['max_rank_total_ns'])}{moved}.")
    for f in job["failed"]:
        items.append(f"{f['file']} was not read: {f['error']}")
    return items


def straggler_sentence(s: dict[str, Any] | None, ranks: int) -> str | None:
    """"Rank 1 is the straggler: 30 ms more of every step on its GPU in spin_kernel (rank 0 waits
    31 ms per step)" or "No straggler: ..." (the one sentence ``ranks`` and the report print);
    None for a single rank."""
    if s is None:
        if ranks < 2:
            return None
        return f"No straggler: no rank waits for another for {STRAGGLER_MIN_WAIT:.0%} of a step or more."
    waits = ", ".join(f"rank {w['rank']} waits {duration(w['wait_per_step_ns'])} per step"
                      for w in s["waits"])
    c = s.get("culprit")
    if c is not None:
        where = {"kernel": "its GPU in", "host function": "its host in", "data loading": "its host loading data in",
                 "sync": "its host blocked in", "OS call": "its host in the OS call"}.get(c["kind"], "its host in")
        why = f"{duration(c['excess_ns_per_step'])} more of every step on {where} {c['name']}"
        if c["kind"] == "kernel":
            why += (", a kernel no other rank runs" if c["only_straggler"] else
                    f" ({duration(c['ns_per_step'])} per step; the others' median {duration(c['others_ns_per_step'])})")
    elif s["cause"] == "GPU compute":
        why = (f"its GPU computes {duration(s['compute_per_step_ns'])} per step, "
               f"{percent(s['excess_pct'], 1)} above the ranks' median")
    else:
        why = (f"its GPU compute per step ({duration(s['compute_per_step_ns'])}) is not the longest, so the delay "
               "is on its host (launches, data loading, Python); no kernel, Python function, sync line or OS call "
               "of it explains it")
    return f"Rank {s['rank']} is the straggler: {why}" + (f" ({waits})." if waits else ".")


def _ranks_section(job: dict[str, Any]) -> Section:
    section = Section("ranks", "Ranks", intro="One row per rank; per-step figures are means over the job's "
                      "steady-state steps (the same step indices on every rank).")
    section.tables.append(Table("ranks", "Ranks", RANK_TABLE_COLUMNS, job["ranks"], label_key="file"))
    s = job["straggler"]
    if s is not None:
        culprit = s.get("culprit")
        section.facts = [("Straggler", f"rank {s['rank']} ({s['file']})"), ("Why", s["cause"]),
                         *([("Cause", f"{culprit['kind']}: {culprit['name']}, "
                                      f"{duration(culprit['excess_ns_per_step'])} more per step")] if culprit else []),
                         ("Its compute per step", duration(s["compute_per_step_ns"])),
                         ("Ranks' median compute per step", duration(s["median_compute_per_step_ns"]))]
        section.facts += [(f"Rank {w['rank']} waits per step", duration(w["wait_per_step_ns"])) for w in s["waits"]]
    section.data = {"straggler": s}
    return section


def _steps_section(job: dict[str, Any]) -> Section:
    section = Section("steps", "Step time per rank", intro=(
        "Steps aligned by their index on every rank. One phase per step for the whole job: warm-up until "
        "the longest warm-up of any rank ends; a teardown on one rank is a teardown on all."))
    rows = job["steps"]
    rank_keys = sorted({k for row in rows for k in row if k.startswith("rank")},
                       key=lambda k: int(k[4:]) if k[4:].isdigit() else 0)
    columns = [Column("index", "Step", "int"), Column("phase", "Phase")] + \
              [Column(k, f"Rank {k[4:]} (ns)", "ns") for k in rank_keys]
    section.tables.append(Table("steps", "Step durations", columns, rows, label_key="index"))
    if rows and rank_keys:
        section.figures.append(Figure("step_time", "Step time per rank", "Each line is one rank.",
                                      _step_time_png(rows, rank_keys), data={"steps": rows}))
    else:
        section.notes.append("no steps were found on any rank (see `profkit steps FILE`)")
    return section


def _breakdown_section(summaries: list[dict[str, Any]]) -> Section:
    rows = [{"rank": s["rank"], **{k: v for k, v in (s.get("breakdown") or {}).items() if not isinstance(v, (dict, list))}}
            for s in summaries if "error" not in s]
    rows.sort(key=lambda r: (r["rank"] is None, r["rank"] or 0))
    keys = [k for k in ("idle_pct", "compute_pct", "non_compute_pct", "comm_comp_overlap_pct") if any(k in r for r in rows)]
    columns = [Column("rank", "Rank", "int")] + [Column(k, k.replace("_pct", " %").replace("_", " "), "pct") for k in keys]
    return Section("breakdown", "Where the time goes, per rank",
                   intro="Temporal breakdown as HTA defines it (idle, compute, non-compute kernel time).",
                   tables=[Table("breakdown", "Breakdown per rank", columns, rows, label_key="rank")])


def message_size(row: dict[str, Any], unsized_source: str = "") -> str:
    """'1.0 MiB' when every call moved the same, else 'min / median / max'."""
    if row.get("msg_bytes_min") is None:
        return f"not recorded{unsized_source}"
    low, mid, high = row["msg_bytes_min"], row["msg_bytes_median"], row["msg_bytes_max"]
    return size(low) if low == high else f"{size(low)} / {size(mid)} / {size(high)}"


def _collectives_section(job: dict[str, Any], summaries: list[dict[str, Any]]) -> Section:
    section = Section("collectives", "Collectives (NCCL kernels)", intro=(
        "Message size: bytes a call moved (elements x element size; an all-gather's whole output, a "
        "reduce-scatter's whole input), as the trace records it. Bandwidth as nccl-tests defines it "
        "(doc/PERFORMANCE.md): algbw = bytes / time; busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for "
        "all-gather and reduce-scatter, 1 for broadcast and reduce. A rank that arrives early waits inside "
        "the kernel, so each call's time is its shortest kernel over the ranks."))
    if not job["collectives"]:
        section.notes.append("no NCCL kernels on any rank")
        return section
    source = {s["rank"]: s.get("source") for s in summaries if "error" not in s}
    rows = []
    for c in job["collectives"]:
        unsized = c.get("unsized_ranks") or []
        from_nsys = bool(unsized) and all(source.get(r) == "nsys" for r in unsized)
        rows.append({**{k: v for k, v in c.items() if k != "by_size"},
                     "message_size": message_size(c, " in this nsys export" if from_nsys else "")})
    section.tables.append(Table("collectives", "By collective type", COLLECTIVE_COLUMNS, rows,
                                label_key="collective"))
    sizes = [{"collective": c["collective"], **b,
              "message_size": size(b["msg_bytes_min"]) if b["exact"] else
              f"{size(b['msg_bytes_min'])} to {size(b['msg_bytes_max'])}"}
             for c in job["collectives"] for b in c.get("by_size") or []]
    if sizes:
        section.tables.append(Table("collective_sizes", "By message size (small messages are latency-bound)",
                                    SIZE_COLUMNS, sizes, label_key="collective"))
    for c in job["collectives"]:
        if c.get("bandwidth_paired") is False:
            section.notes.append(f"{c['collective']}: bandwidth from {c['bandwidth_basis']}: a lower bound")
    unsized = sorted({r for c in job["collectives"] for r in c.get("unsized_ranks") or []},
                     key=lambda r: (r is None, r or 0))
    if unsized:
        nsys = [r for r in unsized if source.get(r) == "nsys"]
        other = [r for r in unsized if source.get(r) != "nsys"]
        if nsys:
            section.notes.append(f"message sizes: not recorded in the nsys exports of rank {_listed(nsys)} "
                                 "(an nsys export declares NCCL's 'Message size' NVTX payload but holds none of its data: "
                                 "NVTX_EVENTS.binaryData is empty; nsys export writes payloads only with "
                                 "--include-blobs=true, which profkit does not read yet); "
                                 "use torch.profiler traces for sizes and bandwidth")
        if other:
            section.notes.append(f"message sizes: not recorded in the traces of rank {_listed(other)} "
                                 "(no 'In msg nelems' on their NCCL kernels or record_param_comms ops)")
    return section


def _listed(ranks: list[Any]) -> str:
    return ", ".join(str(r) for r in ranks)


def _skew_section(job: dict[str, Any], top: int) -> Section:
    section = Section("kernel_skew", "Kernels whose time differs across ranks",
                      intro="Kernels every rank ran, whose total time differs by 10% or more.")
    if job["kernel_skew"]:
        section.tables.append(Table("kernel_skew", "Kernel time skew", SKEW_COLUMNS, job["kernel_skew"][:top]))
    else:
        section.notes.append("every kernel took about the same time on every rank")
    return section


def _step_time_png(rows: list[dict[str, Any]], rank_keys: list[str]) -> bytes:
    from profkit.report.figures import plain_text

    with plain_text():  # rank labels come from the traces
        return _draw_step_times(rows, rank_keys)


def _draw_step_times(rows: list[dict[str, Any]], rank_keys: list[str]) -> bytes:
    from profkit.report.figures import plt, png_bytes

    fig, ax = plt.subplots(figsize=(10, 3.2), dpi=100)
    for key in rank_keys:
        points = [(r["index"], r[key] / 1e6) for r in rows if key in r]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=f"rank {key[4:]}")
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return png_bytes(fig)


def write_job_report(traces: list[Path], out_dir: Path, top: int = 20) -> Path:
    """Read each rank's trace (on a local Dask cluster) and write the cross-rank report into
    ``out_dir``; the HTML's path.  For ``profkit trace`` of a distributed job."""
    from profkit.analysis.ranks.cross_rank import cross_rank
    from profkit.ranks.engine import map_ranks
    from profkit.ranks.inputs import rank_inputs
    from profkit.ranks.per_rank import summarize_rank

    summaries = map_ranks(summarize_rank, rank_inputs(list(traces), None), scheduler=None, workers=None)
    return write_ranks_report(cross_rank(summaries), summaries, out_dir, top)


def write_ranks_report(job: dict[str, Any], summaries: list[dict[str, Any]], out_dir: Path, top: int = 20) -> Path:
    """Write report.html, report.md and report.json of several ranks into ``out_dir``; the HTML's path."""
    from profkit.atomic import write_text
    from profkit.errors import ProfkitError
    from profkit.report import HTML_NAME, JSON_NAME, MD_NAME
    from profkit.report.html import render_html
    from profkit.report.json_report import render_json
    from profkit.report.markdown import render_markdown

    report = build_ranks_report(job, summaries, top)
    texts = {HTML_NAME: render_html(report), MD_NAME: render_markdown(report), JSON_NAME: render_json(report)}
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            write_text(out_dir / name, text)
    except OSError as exc:
        raise ProfkitError(f"cannot write the report into {out_dir}: {exc.strerror or exc}",
                           hint="choose another folder with -o DIR") from None
    return out_dir / HTML_NAME
