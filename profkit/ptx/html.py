"""``--html FILE``: one self-contained page (no scripts, no external files).

A kernel page shows the summary, then PTX and SASS side by side with global
memory instructions marked; a diff page shows the summary deltas and the
normalized unified diff.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jinja2

from profkit.ptx.diff import KernelDiff
from profkit.ptx.parse import CATEGORIES, Listing
from profkit.ptx.render import is_global_memory, memory_mark
from profkit.ptx.summary import VECTOR_BITS, KernelSummary, summary_rows

_TEMPLATE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>profkit ptx: {{ title }}</title>
<style>
 body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d1d1f; }
 h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
 table { border-collapse: collapse; margin: .5em 0; }
 td, th { border: 1px solid #ccc; padding: .2em .6em; text-align: left; }
 td.num { text-align: right; font-variant-numeric: tabular-nums; }
 .verdict { font-weight: 600; }
 .ok { color: #0a7a2f; } .bad { color: #a15c00; }
 .cols { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }
 pre { font: 12px/1.35 ui-monospace, monospace; background: #f6f6f7; padding: .6em; overflow: auto;
       max-height: 80vh; margin: 0; }
 .ln { display: block; white-space: pre; min-height: 1.35em; }
 .wide { background: #d5f5dd; } .narrow { background: #ffe9b3; }
 .mark { color: #555; font-style: italic; }
 .add { background: #e6ffec; } .del { background: #ffebe9; } .hunk { color: #0550ae; }
</style></head><body>
<h1>{{ title }}</h1>
{% if kernel %}
<p class="verdict {{ 'ok' if kernel.vectorized else 'bad' }}">{{ kernel.verdict }}</p>
<div class="cols">
 <div><h2>Summary</h2><table>
 {% for row in kernel.rows %}<tr><th>{{ row.metric }}</th><td>{{ row.value }}</td></tr>{% endfor %}
 </table></div>
 <div><h2>Instruction mix</h2><table><tr><th>category</th><th>PTX</th><th>SASS</th></tr>
 {% for row in kernel.mix %}<tr><td>{{ row[0] }}</td><td class="num">{{ row[1] }}</td>
 <td class="num">{{ row[2] }}</td></tr>{% endfor %}
 </table></div>
</div>
<div class="cols">
{% for listing in kernel.listings %}
 <div><h2>{{ listing.title }}</h2><pre>{% for line in listing.lines -%}
<span class="ln {{ line.cls }}"{% if line.mark %} title="{{ line.mark }}"{% endif %}>{{ line.text }}
{%- if line.mark %}  <span class="mark">// {{ line.mark }}</span>{% endif %}</span>
{%- endfor %}</pre></div>
{% endfor %}
</div>
{% endif %}
{% if diff %}
<h2>Summary deltas</h2>
<table><tr><th>metric</th><th>{{ diff.a_label }}</th><th>{{ diff.b_label }}</th><th>change</th></tr>
{% for row in diff.deltas %}<tr><td>{{ row.metric }}</td><td class="num">{{ row.a }}</td><td class="num">{{ row.b }}</td>
<td class="num">{{ row.change }}</td></tr>{% endfor %}</table>
<h2>{{ diff.language }} diff (registers and labels normalized)</h2>
<pre>{% for line in diff.lines %}<span class="ln {{ line.cls }}">{{ line.text }}</span>{% endfor %}</pre>
{% endif %}
</body></html>
"""


@dataclass(frozen=True)
class HtmlListing:
    title: str
    listing: Listing | None


def _lines(listing: Listing | None) -> list[dict[str, str]]:
    if listing is None:
        return [{"text": "(not available: a cubin holds no PTX)", "cls": "", "mark": ""}]
    by_line = listing.by_line()
    out = []
    for i, line in enumerate(listing.lines):
        ins = by_line.get(i)
        if is_global_memory(ins):
            cls = "wide" if ins.width_bits >= VECTOR_BITS else "narrow"
            out.append({"text": line, "cls": cls, "mark": memory_mark(ins)})
        else:
            out.append({"text": line, "cls": "", "mark": ""})
    return out


def _environment() -> jinja2.Environment:
    return jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)


def kernel_page(summary: KernelSummary, ptx: Listing | None, sass: Listing,
                ptx_summary: KernelSummary | None) -> str:
    """PTX and SASS side by side with the summary (resources from the cubin)."""
    sass_mix = summary.mix
    rows: list[tuple[str, Any, Any]] = []
    for category in CATEGORIES:
        p = ptx_summary.mix.counts[category] if ptx_summary else ""
        s = sass_mix.counts[category]
        if p or s:
            rows.append((category.replace("_", " "), p, s))
    for noun, attr in (("global loads", "global_loads"), ("global stores", "global_stores")):
        widths = set(getattr(sass_mix, attr)) | (set(getattr(ptx_summary.mix, attr)) if ptx_summary else set())
        for w in sorted(widths, reverse=True):
            rows.append((f"{noun} {w}-bit", getattr(ptx_summary.mix, attr).get(w, 0) if ptx_summary else "",
                         getattr(sass_mix, attr).get(w, 0)))
    rows.append(("instructions", ptx_summary.mix.total if ptx_summary else "", sass_mix.total))
    verdict = summary.verdict if ptx_summary is None else f"PTX: {ptx_summary.verdict}. SASS: {summary.verdict}."
    kernel = {
        "verdict": verdict, "vectorized": summary.vectorized,
        "rows": [r for r in summary_rows(summary) if r["metric"] != "verdict"],
        "mix": rows,
        "listings": [{"title": "PTX", "lines": _lines(ptx)}, {"title": "SASS", "lines": _lines(sass)}],
    }
    title = f"{summary.kernel} [{summary.arch}] from {summary.source}"
    return _environment().from_string(_TEMPLATE).render(title=title, kernel=kernel, diff=None)


def diff_page(diff: KernelDiff, a_label: str, b_label: str) -> str:
    def cls(line: str) -> str:
        if line.startswith(("+++", "---")):
            return ""
        return {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "")

    data = {
        "a_label": a_label, "b_label": b_label, "language": diff.language.upper(), "deltas": diff.deltas,
        "lines": [{"text": line, "cls": cls(line)} for line in diff.lines]
        or [{"text": "no difference once registers and labels are normalized", "cls": ""}],
    }
    return _environment().from_string(_TEMPLATE).render(title=f"{a_label} vs {b_label}", kernel=None, diff=data)
