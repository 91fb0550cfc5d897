"""Hostile inputs of issue 25, each built in the test from a real fixture (``hostile_*`` files).

Nothing here is committed as a file: every builder copies a real Kineto trace
or nsys export and plants one crafted shape into it, the shape an adversarial
review used (a long kernel name, a decompression bomb, an endless view, deep
``args``, control characters, a run.json naming "/").
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from tests.conftest import DATA, nsys_fixture

KINETO_BASE = DATA / "kineto" / "mlp_plain.json.gz"  # a real torch.profiler trace of an MLP
NSYS_BASE = "nsys2025_sync_apis"  # the smallest real export


def kineto_document(base: Path = KINETO_BASE) -> dict[str, Any]:
    return json.loads(gzip.decompress(base.read_bytes()))


def first_kernel_name(doc: dict[str, Any]) -> str:
    return next(e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel")


def rename_kernel(doc: dict[str, Any], old: str, new: str) -> None:
    for event in doc["traceEvents"]:
        if event.get("name") == old:
            event["name"] = new


def write_kineto(doc: Any, dest: Path, indent: bool = True) -> Path:
    data = json.dumps(doc, indent=2 if indent else None).encode()
    dest.write_bytes(gzip.compress(data, 1) if dest.name.endswith(".gz") else data)
    return dest


def long_name_trace(dest_dir: Path, length: int) -> tuple[Path, str]:
    """The real MLP trace with its first kernel renamed to ``void f<(aaa...>(int)`` (``length`` a's):
    the shape that made the name patterns backtrack."""
    doc = kineto_document()
    name = "void f<(" + "a" * length + ">(int)"
    rename_kernel(doc, first_kernel_name(doc), name)
    return write_kineto(doc, dest_dir / f"hostile_long_name_{length}.json.gz"), name


def whitespace_bomb(dest_dir: Path, whitespace_bytes: int) -> Path:
    """The real trace's header and first events with ``whitespace_bytes`` of spaces inside
    ``traceEvents``, gzipped (it compresses about 1000:1)."""
    doc = kineto_document()
    events = doc.pop("traceEvents")[:50]
    head = json.dumps(doc)[:-1] + ', "traceEvents": [\n  ' + json.dumps(events[0])
    dest = dest_dir / f"hostile_bomb_{whitespace_bytes >> 20}mib.json.gz"
    block = b" " * (1 << 20)
    with gzip.open(dest, "wb", compresslevel=9) as fh:
        fh.write(head.encode())
        for _ in range(whitespace_bytes >> 20):
            fh.write(block)
        fh.write((",\n  " + ",\n  ".join(json.dumps(e) for e in events[1:]) + "\n]}").encode())
    return dest


def many_events_trace(dest_dir: Path, count: int) -> Path:
    """The real trace's header and events followed by ``count`` tiny events (``{}``), gzipped."""
    doc = kineto_document()
    events = doc.pop("traceEvents")
    head = json.dumps(doc)[:-1] + ', "traceEvents": [\n  '
    dest = dest_dir / f"hostile_events_{count}.json.gz"
    with gzip.open(dest, "wb", compresslevel=9) as fh:
        fh.write(head.encode())
        fh.write(",\n  ".join(json.dumps(e) for e in events).encode())
        chunk = b",\n  {}" * 100_000
        for _ in range(count // 100_000):
            fh.write(chunk)
        fh.write(b"\n]}")
    return dest


def deep_args_trace(dest_dir: Path, depth: int) -> Path:
    """The real trace with one kernel's ``args`` holding ``depth`` nested objects."""
    doc = kineto_document()
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    text = '{"a": ' * depth + "1" + "}" * depth
    marker = "__DEEP__"
    kernel["args"]["deep"] = marker
    data = json.dumps(doc, indent=2).replace(f'"{marker}"', text).encode()
    dest = dest_dir / f"hostile_deep_{depth}.json.gz"
    dest.write_bytes(gzip.compress(data, 1))
    return dest


def copy_export(dest: Path, fixture: str = NSYS_BASE) -> Path:
    shutil.copyfile(nsys_fixture(fixture), dest)
    return dest


def endless_view_export(dest_dir: Path, fixture: str = NSYS_BASE) -> Path:
    """A real export whose CUPTI_ACTIVITY_KIND_KERNEL is replaced by a view over an endless recursive CTE."""
    dest = copy_export(dest_dir / "hostile_view.sqlite", fixture)
    conn = sqlite3.connect(dest)
    with conn:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
        conn.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
        select = ", ".join(f"n AS {c}" for c in columns)
        conn.execute("CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS WITH RECURSIVE r(n) AS "
                     f"(SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT {select} FROM r")
    conn.execute("VACUUM")
    conn.close()
    return dest


def set_string(conn: sqlite3.Connection, old_id_sql: str, text: str) -> None:
    """Point StringIds row (chosen by ``old_id_sql``) at ``text``."""
    conn.execute(f"UPDATE StringIds SET value = ? WHERE id = ({old_id_sql})", (text,))


def renamed_kernel_export(dest_dir: Path, name: str, fixture: str = NSYS_BASE, tag: str = "name") -> Path:
    """A real export whose most-launched kernel is renamed to ``name`` (in StringIds)."""
    dest = copy_export(dest_dir / f"hostile_{tag}.sqlite", fixture)
    conn = sqlite3.connect(dest)
    with conn:
        set_string(conn, "SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY demangledName "
                         "ORDER BY count(*) DESC LIMIT 1", name)
    conn.close()
    return dest


def root_cache_run(root: Path) -> Path:
    """The real run folder reports/gelu whose run.json names "/" as its inductor cache."""
    from tests.run_folders import unpacked_run

    run = unpacked_run("gelu", root, caches=())
    record = json.loads((run / "run.json").read_text())
    record["kernel_caches"] = {"inductor": "/", "triton": "/"}
    (run / "run.json").write_text(json.dumps(record))
    return run
