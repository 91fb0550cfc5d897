"""report.json: everything the HTML and Markdown show, for machines.

Tables carry all their rows (the HTML/Markdown show the first ``top`` and
the "(other K)" row, which is given too); figures carry the numbers they
plot (busy ns per bin and stream, per device, the NVTX ranges drawn).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, is_dataclass
from typing import Any

from profkit.report.model import Report, Section, Table

SCHEMA = "profkit.report/1"


def _table(table: Table) -> dict[str, Any]:
    return {
        "title": table.title,
        "columns": [{"key": c.key, "title": c.title, "kind": c.kind} for c in table.columns],
        "rows": table.rows,
        "top": table.top,
        "other": table.other,
    }


def _section(section: Section) -> dict[str, Any]:
    return {
        "title": section.title,
        "intro": section.intro,
        "notes": section.notes,
        "facts": [[label, value] for label, value in section.facts],
        "tables": {t.key: _table(t) for t in section.tables},
        "figures": {f.key: {"title": f.title, "caption": f.caption, "data": f.data} for f in section.figures},
        "data": section.data,
    }


def report_dict(report: Report) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "title": report.title,
        "export": report.export_name,
        "generated_utc": report.generated_utc,
        "profkit_version": report.profkit_version,
        "partial": report.partial,
        "partial_reason": report.partial_reason,
        "run_info": report.run_info,
        "top": report.top,
        "findings": report.findings,
        "capture": report.capture,
        "sections": {s.key: _section(s) for s in report.sections},
    }


def render_json(report: Report) -> str:
    return json.dumps(_finite(report_dict(report)), indent=1, default=_default, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    """NaN and infinities as null: JSON has no spelling for them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
        return None if isinstance(value, float) and not math.isfinite(value) else value
    if hasattr(value, "tolist"):  # numpy arrays
        return value.tolist()
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)  # paths and the like
