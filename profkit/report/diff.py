"""Render a `profkit diff` result: a pull-request comment (Markdown) and terminal text.

The Markdown puts the verdict and the five biggest changes first and folds
the details into ``<details>`` blocks, and stays under GitHub's comment limit
(65,536 characters) by cutting the long tables, saying how many rows it cut.
"""

from __future__ import annotations

from typing import Any

from profkit.analysis.memory import size
from profkit.output import md_escape
from profkit.report.text import duration

GITHUB_COMMENT_LIMIT = 65_536
BUDGET = 60_000  # leave room for whatever the CI job adds around it
TOP_CHANGES = 5
VERDICT_WORDS = {"slower": "🔴 slower", "faster": "🟢 faster", "no change": "⚪ no change", "unknown": "❔ unknown"}


def headline(result: dict[str, Any], figure: str = "step") -> str:
    """The step time's verdict in one line (``figure`` "kernel_time": the GPU kernel time per step's).
    The interval is over each run's steps: it leaves out how much two runs of one program differ."""
    step = result.get(figure) or {}
    what = "Step time" if figure == "step" else "GPU kernel time per step"
    if step.get("base_median_ns") is None:
        return f"{what}: unknown ({step.get('why') or 'not measured'})"
    ci = (f", 95% CI over steps {step['ci_low_pct']:+.1f}% .. {step['ci_high_pct']:+.1f}%"
          if step.get("ci_low_pct") is not None else f": {step['why']}")
    return (f"{what}: {step['verdict']} — median {duration(step['base_median_ns'])} → "
            f"{duration(step['new_median_ns'])} ({step['delta_pct']:+.1f}%{ci}; "
            f"{step.get('base_steps', '?')} vs {step.get('new_steps', '?')} steady steps)")


def memory_lines(result: dict[str, Any]) -> list[str]:
    """Peak memory in sentences: one per device compared (the median per-step peak allocated, its
    change and verdict, and the reserved peak's), or the one line saying why it was not compared;
    none when neither trace recorded the allocator."""
    memory = result.get("memory")
    if not memory:
        return []
    lines = []
    for d in memory["devices"]:
        a, r = d["allocated"], d["reserved"]
        if a["exact"]:
            how = "exact: every steady step peaks alike"
        elif a["ci_low_pct"] is not None:
            how = f"95% CI {a['ci_low_pct']:+.2f}% .. {a['ci_high_pct']:+.2f}%"
        else:
            how = a["why"]
        pct = f", {a['delta_pct']:+.2f}%" if a["delta_pct"] is not None else ""
        reserved = (f"; reserved {size(r['base_median_bytes'])} → {size(r['new_median_bytes'])} ({r['verdict']})"
                    if r else "")
        lines.append(f"Peak memory ({d['label']}): {a['verdict']} — median per-step peak {d.get('figure', 'allocated')} "
                     f"{size(a['base_median_bytes'])} → {size(a['new_median_bytes'])} "
                     f"({_signed_size(a['delta_bytes'])}{pct}; {how}; {a['base_steps']} vs {a['new_steps']} "
                     f"steady steps){reserved}")
    if memory.get("note"):
        lines.append(f"Peak memory: {memory['note']}")
    return lines


def _signed_size(n: float) -> str:
    return ("+" if n > 0 else "−" if n < 0 else "±") + size(abs(int(n)))


def top_changes(result: dict[str, Any], n: int = TOP_CHANGES) -> list[str]:
    """The n biggest changes, in words."""
    lines = []
    for k in result["kernels"]:
        if k["status"] == "same":
            continue
        what = {"new": "new", "gone": "gone", "slower": "slower", "faster": "faster",
                "changed": f"changed its template arguments (was `{_code(k.get('base_name'), 90)}`)"}[k["status"]]
        lines.append((abs(k["delta_ns_per_step"]),
                      f"kernel `{_code(k['name'], 90)}` {what}: {duration(k['base_ns_per_step'])} → "
                      f"{duration(k['new_ns_per_step'])} per step"))
    for s in result["syncs"]:
        if s["status"] in ("added", "removed", "changed"):  # a sync's count moves step time more than µs of kernels
            lines.append((float("inf"), f"sync site {s['status']}: `{_code(s['source'], 90)}` ({md_escape(s['api'])}, "
                                        f"{s['base_count']} → {s['new_count']})"))
    lines.sort(key=lambda x: -x[0])
    return [text for _, text in lines[:n]]


def render_markdown(result: dict[str, Any]) -> str:
    step = result["step"]
    note = (result.get("profilers") or {}).get("note")
    parts = [f"> ⚠️ {md_escape(note)}", ""] if note else []
    parts += [f"### profkit diff: {VERDICT_WORDS.get(step['verdict'], step['verdict'])}", "",
             f"`{_code(result['base'])}` → `{_code(result['new'])}`", "", md_escape(headline(result)), "",
             md_escape(headline(result, "kernel_time")), ""]
    parts += [f"{md_escape(line)}\n" for line in memory_lines(result)]
    parts += [f"> {md_escape(n)}\n" for n in result.get("notes", ())]
    changes = top_changes(result)
    if changes:
        parts += ["**Top changes**", ""] + [f"- {c}" for c in changes] + [""]
    budget = BUDGET - sum(len(p) + 1 for p in parts)
    for title, block in _detail_blocks(result):
        text = _fit(block, max(budget - len(title) - 60, 0))
        folded = f"<details><summary>{title}</summary>\n\n{text}\n</details>\n"
        if len(folded) > budget:
            break
        parts.append(folded)
        budget -= len(folded)
    return "\n".join(parts).rstrip() + "\n"


def _detail_blocks(result: dict[str, Any]) -> list[tuple[str, list[str]]]:
    kernels = [k for k in result["kernels"] if k["status"] != "same"] + \
              [k for k in result["kernels"] if k["status"] == "same"]
    kernel_rows = ["| Kernel | Base / step | New / step | Δ / step | Status | Regs | Vectorized |",
                   "| :-- | --: | --: | --: | :-- | --: | :-- |"] + [
        f"| `{_code(k['name'], 120, cell=True)}` | {duration(k['base_ns_per_step'])} | {duration(k['new_ns_per_step'])} | "
        f"{_signed_duration(k['delta_ns_per_step'])} | {k['status']} | {_blank(k.get('registers'))} | "
        f"{_blank(k.get('vector_grade') or k.get('vectorization'))} |" for k in kernels]
    sync_rows = ["| Source | API | Base | New | Status |", "| :-- | :-- | --: | --: | :-- |"] + [
        f"| `{_code(s['source'], 120, cell=True)}` | {md_escape(s['api'])} | {s['base_count']} | {s['new_count']} | {s['status']} |"
        for s in result["syncs"]]
    resource_rows = ["| Kernel | Registers | Shared memory / block |", "| :-- | --: | --: |"] + [
        f"| `{_code(r['name'], 120, cell=True)}` | {r['base_registers']} → {r['new_registers']} | "
        f"{r['base_smem_bytes']:,} → {r['new_smem_bytes']:,} B |" for r in result["resources"]]
    shift = result.get("breakdown") or {}
    breakdown_rows = ["| Share of the steady state | Base | New | Δ (points) |", "| :-- | --: | --: | --: |"] + [
        f"| {k.replace('_pct', '').replace('_', ' ')} | {shift['base'][k]:.1f}% | {shift['new'][k]:.1f}% | "
        f"{v:+.1f} |" for k, v in (shift.get("delta_pct_points") or {}).items()]
    blocks = [("Kernels (time per steady step)", kernel_rows), ("Sync sites", sync_rows)]
    if result["resources"]:
        blocks.append(("Registers and shared memory", resource_rows))
    if shift.get("delta_pct_points"):
        blocks.append(("Compute / communication / idle", breakdown_rows))
    return blocks


def _fit(rows: list[str], budget: int) -> str:
    """As many table rows as fit in ``budget`` characters, and a line saying how many were cut."""
    kept, used = [], 0
    for i, row in enumerate(rows):
        if used + len(row) + 1 > budget - 80 and i >= 2:
            kept.append(f"\n_{len(rows) - i} more rows cut to fit a comment; see `profkit diff --format json`._")
            break
        kept.append(row)
        used += len(row) + 1
    return "\n".join(kept)


def change_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per compared figure (`profkit diff --format csv`): the step time (its
    median), the peak memory (median per-step peak allocated and reserved, per device), each
    kernel (GPU time per steady step) and each sync site (its count).
    Columns: kind, status, name, api, base, new, delta, delta_pct, unit."""
    step = result["step"]
    rows = [{"kind": "step", "status": step["verdict"], "name": "step time (median)", "api": None,
             "base": step.get("base_median_ns"), "new": step.get("new_median_ns"),
             "delta": (step["new_median_ns"] - step["base_median_ns"]) if step.get("base_median_ns") is not None
             and step.get("new_median_ns") is not None else None,
             "delta_pct": step.get("delta_pct"), "unit": "ns"}]
    for d in (result.get("memory") or {}).get("devices", ()):
        for figure in ("allocated", "reserved"):
            c = d[figure]
            if c:
                rows.append({"kind": "memory", "status": c["verdict"], "name": f"peak {figure} ({d['label']}, median "
                             "per step)", "api": None, "base": c["base_median_bytes"], "new": c["new_median_bytes"],
                             "delta": c["delta_bytes"], "delta_pct": c["delta_pct"], "unit": "bytes"})
    rows += [{"kind": "kernel", "status": k["status"], "name": k["name"], "api": None,
              "base": k["base_ns_per_step"], "new": k["new_ns_per_step"], "delta": k["delta_ns_per_step"],
              "delta_pct": k["delta_pct"], "unit": "ns per step"} for k in result["kernels"]]
    rows += [{"kind": "sync", "status": s["status"], "name": s["source"], "api": s["api"],
              "base": s["base_count"], "new": s["new_count"], "delta": s["new_count"] - s["base_count"],
              "delta_pct": 100.0 * (s["new_count"] / s["base_count"] - 1) if s["base_count"] else None,
              "unit": "syncs"} for s in result["syncs"]]
    return rows


def render_text(result: dict[str, Any], labels: dict[str, str] | None = None, n: int = TOP_CHANGES) -> str:
    """The terminal's summary (`profkit diff`'s table format): the verdict, the peak memory
    (``memory_lines``), then the causes in a few lines: syncs per run and sync sites added/removed/changed, GPU
    kernel time per step and how many kernels changed, then the ``n`` biggest changes.
    ``labels``: the name each kernel is shown by (the tables' short names), else the
    full name."""
    labels = labels or {}
    note = (result.get("profilers") or {}).get("note")
    lines = [note] if note else []  # first: it qualifies every figure below
    lines += [headline(result), *memory_lines(result), *(f"Note: {n}" for n in result.get("notes", ()))]
    syncs = result["syncs"]
    if syncs:
        base, new = sum(s["base_count"] for s in syncs), sum(s["new_count"] for s in syncs)
        moved = _counts(syncs, ("added", "removed", "changed"))
        lines.append(f"Syncs in the trace: {base:,} → {new:,}; " + (f"sync sites {moved}" if moved else
                                                                     "no sync site changed"))
    kernels = result["kernels"]
    if kernels:
        moved = _counts(kernels, ("slower", "faster", "new", "gone", "changed"))
        lines.append(headline(result, "kernel_time") + "; "
                     + (f"of {len(kernels)} kernels {moved}" if moved else f"none of {len(kernels)} kernels changed"))
    changes = []
    for s in syncs:
        if s["status"] in ("added", "removed", "changed"):  # a sync's count moves step time more than µs of kernels
            code = f" {_code(s['code'], 60)}" if s.get("code") else ""
            changes.append((float("inf"), f"sync site {s['status']}: {site_label(s['source'])}{code} "
                                          f"({s['api']}, {s['base_count']} → {s['new_count']})"))
    for k in kernels:
        if k["status"] != "same":
            what = k["status"] if k["status"] != "changed" else \
                f"changed its template arguments (was {labels.get(k.get('base_name'), k.get('base_name'))})"
            changes.append((abs(k["delta_ns_per_step"]),
                            f"kernel {labels.get(k['name'], k['name'])} {what}: "
                            f"{duration(k['base_ns_per_step'])} → {duration(k['new_ns_per_step'])} per step"))
    changes.sort(key=lambda x: -x[0])
    lines += [f"  - {text}" for _, text in changes[:n]]
    return "\n".join(lines)


def _counts(items: list[dict[str, Any]], statuses: tuple[str, ...]) -> str:
    """"2 added, 1 removed": how many items have each status, those with none left out."""
    counts = [(sum(1 for i in items if i["status"] == status), status) for status in statuses]
    return ", ".join(f"{count} {status}" for count, status in counts if count)


def site_label(source: str) -> str:
    """A sync site as tables show it: ``train_mlp.py:59`` for ``../src/train_mlp.py:59``."""
    return str(source).replace("\\", "/").rsplit("/", 1)[-1]


def _code(text: Any, limit: int = 200, *, cell: bool = False) -> str:
    """A name from the trace for a code span (GitHub links and marks nothing inside one).

    ``cell``: inside a table row, where GFM splits cells at every unescaped ``|``
    before reading code spans, so a name's ``|`` would end the span and the
    rest of the name would render as live Markdown."""
    s = " ".join(str(text).split()).replace("`", "'")
    s = s if len(s) <= limit else s[: limit - 1] + "…"
    return s.replace("|", "\\|") if cell else s


def _blank(value: Any) -> str:
    return "" if value is None else md_escape(str(value))


def _signed_duration(ns: float) -> str:
    return ("+" if ns > 0 else "−" if ns < 0 else "") + duration(abs(ns))
