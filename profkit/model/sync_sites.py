"""The text of a sync-site range: where in Python a synchronizing call was made.

``profkit trace --python-sync-sites`` (``profkit.capture.sync_hook``) wraps every call
that can block the CPU on the GPU in a range with this text; the readers label those
ranges and the stall analysis reads them back.  The format lives here, below all three,
so that a reader or an analysis never imports capture code to parse a range name.

Range text:  ``profkit.sync|<kind>|<file>:<line>|<source line>``, in the NVTX domain
``profkit.sync`` (nsys) or as a ``record_function`` name (torch.profiler).

Plain strings only (no numpy): the hook imports this inside the profiled process.
"""

from __future__ import annotations

DOMAIN = "profkit.sync"
PREFIX = "profkit.sync|"

# the kinds of synchronizing call the hook wraps
ITEM = "item"
CPU = "cpu"
TOLIST = "tolist"
FORMAT = "print/format"
TRUTH = "truthiness"
SYNCHRONIZE = "synchronize"

# each kind as the user wrote it, for tables and findings
CALL_LABELS = {
    ITEM: ".item()", CPU: ".cpu()", TOLIST: ".tolist()", FORMAT: "print/format", TRUTH: "truthiness",
    SYNCHRONIZE: "torch.cuda.synchronize()",
}


def encode_site(kind: str, filename: str, lineno: int, code: str) -> str:
    code = " ".join(code.split()).replace("|", "¦")
    return f"{PREFIX}{kind}|{filename}:{lineno}|{code}"


def decode_site(text: str) -> tuple[str, str, str] | None:
    """(kind, "file:line", code) from a range text, or None if not ours."""
    if not text or not text.startswith(PREFIX):
        return None
    parts = text[len(PREFIX):].split("|", 2)
    if len(parts) != 3:
        return None
    return parts[0], parts[1], parts[2]


def readable_range(name: str) -> str:
    """An NVTX range name as a person reads it: a sync-site range (``profkit.sync|item|
    /src/train.py:42|loss.item()``, with or without its ``profkit.sync:`` domain) becomes
    ``sync: .item() at train.py:42: loss.item()``; any other name is returned as it is."""
    text = name[len(DOMAIN) + 1:] if name.startswith(DOMAIN + ":" + PREFIX) else name
    decoded = decode_site(text)
    if decoded is None:
        return name
    kind, where, code = decoded
    path, _, line = where.rpartition(":")
    place = f"{path.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line}" if path else where
    code = code.replace("¦", "|")  # encode_site escapes "|" in code
    return f"sync: {CALL_LABELS.get(kind, kind)} at {place}" + (f": {code}" if code else "")


def readable_rows(rows: list[dict], key: str = "name") -> list[dict]:
    """Rows whose ``key`` is a range name, with sync-site names made readable (``readable_range``)."""
    return [{**row, key: readable_range(row[key])} if isinstance(row.get(key), str) else row for row in rows]
