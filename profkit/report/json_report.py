"""report.json: everything the HTML and Markdown show, for machines.

Tables carry all their rows (the HTML/Markdown show the first ``top`` and
the "(other K)" row, which is given too); figures carry the numbers they
plot (busy ns per bin and stream, per device, the NVTX ranges drawn).
"""

from __future__ import annotations

import json
import math
import re
import secrets
from dataclasses import asdict, is_dataclass
from json.encoder import encode_basestring_ascii
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


# Lists at least this long of only ints or only strings (the figures' busy ns per bin, the
# steps' columns: nearly all of report.json's values) are written by join at C speed;
# json.dumps with an indent runs its pure-Python encoder over every value.
FAST_LIST = 64


def render_json(report: Report) -> str:
    lists: list[str] = []
    # a placeholder no string of the trace can spell: the long lists are put in after, in one pass
    token = f"\0profkit-list-{secrets.token_hex(8)}-"
    text = json.dumps(_prepare(report_dict(report), 0, lists, token), indent=1, default=_default,
                      allow_nan=False)
    if not lists:
        return text + "\n"
    placeholder = re.compile(re.escape(encode_basestring_ascii(token)[:-1]) + r'(\d+)"')
    return placeholder.sub(lambda m: lists[int(m.group(1))], text) + "\n"


def _prepare(value: Any, level: int, lists: list[str], token: str) -> Any:
    """``value`` with NaN and infinities as null (JSON has no spelling for them) and each long
    int or str list, at nesting ``level``, replaced by ``token`` and its index in ``lists``,
    which gets the text json.dumps(indent=1) gives that list there."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _prepare(v, level + 1, lists, token) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if len(value) >= FAST_LIST:
            kinds = set(map(type, value))
            if kinds == {int} or kinds == {str}:
                lists.append(_list_text(value, level, int in kinds))
                return f"{token}{len(lists) - 1}"
        return [_prepare(v, level + 1, lists, token) for v in value]
    return value


def _list_text(values: list[Any] | tuple[Any, ...], level: int, ints: bool) -> str:
    """What json.dumps(indent=1) writes for a non-empty list of ints or strings at ``level``:
    the same encoders (int.__repr__, encode_basestring_ascii), one item per line."""
    items = map(int.__repr__, values) if ints else map(encode_basestring_ascii, values)
    inner = "\n" + " " * (level + 1)
    return "[" + inner + ("," + inner).join(items) + "\n" + " " * level + "]"


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
