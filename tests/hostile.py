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
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from profkit.cli import cli
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


# -- secrets planted in every place issue 25 found a gap -----------------------------------------
class Planted:
    def __init__(self, path: Path, values: dict[str, str]) -> None:
        self.path, self.values = path, values


def _values(prefix: str) -> dict[str, str]:
    """One fake secret per place, none of a well-known token shape (only the rules find them)."""
    places = ["nvtx_assignment", "stdout_assignment", "option_equals", "option_space", "short_p", "url_no_user",
              "query_token", "mysql_pwd_copy", "ci_job_jwt_copy", "int_column", "member_key", "member_value",
              "argv_list"]
    return {place: f"{prefix}{i:02d}Zq7w{place.replace('_', '')[:6]}X9v" for i, place in enumerate(places)}


def planted_everywhere_export(dest_dir: Path, fixture: str = NSYS_BASE) -> Planted:
    """A real export (planted.plant_secret's copy) with issue 25's secrets: in an NVTX text, in
    program stdout (ProcessStreams), on the command line (--aws-secret=, --password V, -pV), as URL
    and query credentials, as copies of MYSQL_PWD / CI_JOB_JWT values of the recorded environment,
    and as text in an integer column."""
    from tests.planted import plant_secret

    path = plant_secret(fixture, dest_dir)
    v = _values("nsys")
    conn = sqlite3.connect(path)
    with conn:
        env = conn.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'").fetchone()[0]
        env += f";MYSQL_PWD={v['mysql_pwd_copy']};CI_JOB_JWT={v['ci_job_jwt_copy']}"
        conn.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'DeviceEnvironment'", (env,))
        next_id = conn.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
        texts = {
            "nvtx": f"AWS_SECRET_ACCESS_KEY={v['nvtx_assignment']} and {v['mysql_pwd_copy']}",
            "stdout": (f"step 1\nexport AWS_SECRET_ACCESS_KEY={v['stdout_assignment']}\n"
                       f"redis://:{v['url_no_user']}@cache:6379 https://hub.example/x?token={v['query_token']}&a=1\n"),
        }
        conn.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (next_id, texts["nvtx"]))
        conn.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (next_id + 1, texts["stdout"]))
        conn.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (next_id + 2, "/tmp/stdout.txt"))
        rowid = conn.execute("SELECT rowid FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start DESC LIMIT 1"
                             ).fetchone()[0]
        cols = {r[1] for r in conn.execute("PRAGMA table_info(NVTX_EVENTS)")}
        if "textId" in cols:
            conn.execute("UPDATE NVTX_EVENTS SET textId = ? WHERE rowid = ?", (next_id, rowid))
        if "text" in cols:
            conn.execute("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = ?",
                         (None if "textId" in cols else texts["nvtx"], rowid))
        pid = conn.execute("SELECT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()[0]
        conn.execute("INSERT INTO ProcessStreams (globalPid, filenameId, contentId) VALUES (?, ?, ?)",
                     (pid, next_id + 2, next_id + 1))
        last = conn.execute("SELECT max(CAST(substr(name, 20) AS INTEGER)) FROM META_DATA_CAPTURE "
                            "WHERE name GLOB 'PROCESS_0:ARGUMENT_*'").fetchone()[0]
        for i, arg in enumerate([f"--aws-secret={v['option_equals']}", "--password", v["option_space"],
                                 f"-p{v['short_p']}", f"--job={v['ci_job_jwt_copy']}"]):
            conn.execute("INSERT INTO META_DATA_CAPTURE (name, value) VALUES (?, ?)",
                         (f"PROCESS_0:ARGUMENT_{last + 1 + i}", arg))
        # text where nsys writes an integer (SQLite allows it): NVTX_EVENTS.color
        conn.execute("UPDATE NVTX_EVENTS SET color = ? WHERE rowid = (SELECT max(rowid) FROM NVTX_EVENTS)",
                     (f"token={v['int_column']}",))
    conn.close()
    return Planted(path, {k: v[k] for k in ("nvtx_assignment", "stdout_assignment", "option_equals", "option_space",
                                            "short_p", "url_no_user", "query_token", "mysql_pwd_copy",
                                            "ci_job_jwt_copy", "int_column")})


def planted_everywhere_kineto(dest_dir: Path) -> Planted:
    """The real MLP trace with issue 25's secrets in Kineto args (keys and values), a
    record_function name, an argv list, URL and query credentials, and a recorded
    environment whose MYSQL_PWD / CI_JOB_JWT values are copied elsewhere."""
    doc = kineto_document()
    v = _values("kineto")
    doc["environment"] = {"MYSQL_PWD": v["mysql_pwd_copy"], "CI_JOB_JWT": v["ci_job_jwt_copy"], "HOME": "/home/a"}
    doc["cmdline"] = ["train.py", f"--aws-secret={v['option_equals']}", "--password", v["argv_list"],
                      f"-p{v['short_p']}"]
    events = doc["traceEvents"]
    op = next(e for e in events if e.get("cat") == "cpu_op")
    op["args"][f"token={v['member_key']}"] = 1
    op["args"]["AWS_SECRET_ACCESS_KEY"] = v["member_value"]
    op["args"]["note"] = (f"AWS_SECRET_ACCESS_KEY={v['nvtx_assignment']} --password {v['option_space']} "
                          f"redis://:{v['url_no_user']}@cache/0 https://h.example/?token={v['query_token']}")
    annotation = next(e for e in events if e.get("cat") == "user_annotation")
    annotation["args"] = {**annotation.get("args", {}), "job": f"{v['ci_job_jwt_copy']} {v['mysql_pwd_copy']}"}
    path = write_kineto(doc, dest_dir / "hostile_planted.json.gz")
    return Planted(path, {k: v[k] for k in ("mysql_pwd_copy", "ci_job_jwt_copy", "option_equals", "argv_list",
                                            "short_p", "member_key", "member_value", "nvtx_assignment",
                                            "option_space", "url_no_user", "query_token")})


def run(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str, float]:
    """``profkit ARGS`` in this process: (exit code, stdout, stderr, seconds); an exception other
    than the CLI's own exit is raised (a traceback is a failure of the hostile tests)."""
    start = time.perf_counter()
    result = CliRunner().invoke(cli, args, env=env)
    elapsed = time.perf_counter() - start
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    # the bytes as written (Result.stdout turns "\r\n" into "\n")
    return result.exit_code, result.stdout_bytes.decode("utf-8", "replace"), result.stderr, elapsed
