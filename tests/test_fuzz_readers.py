"""Property-based fuzzing of every reader, through the CLI (issue 15).

Inputs are real captures mutated by hypothesis (nsys exports: truncation,
flipped bytes, dropped tables and columns, NULLs, huge strings, hostile
names; an ncu CSV; a real Triton PTX file; a run folder's run.json) and,
for Kineto, a synthetic trace built here (the reader's bad-input tests use
the same shape).  For every case, the properties:

- no traceback: the command ends with exit 0, or exit 2 and one line
  ``profkit: error: ...`` on stderr;
- the input is unchanged (sha256);
- bounded time: hypothesis fails a case slower than ``DEADLINE``.

The default run does a few examples per reader (CI).  The large run:

    PROFKIT_FUZZ=slow python -m pytest tests/test_fuzz_readers.py --hypothesis-show-statistics

(``PROFKIT_FUZZ_EXAMPLES=N`` sets the examples per test; 2,000 by default;
the count of cases is printed by ``test_slow_run_count``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import sqlite3
import tarfile
import lzma
from datetime import timedelta
from pathlib import Path
from typing import Callable

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profkit.cli import cli
from tests.conftest import DATA, ncu_fixture, nsys_fixture

SLOW = os.environ.get("PROFKIT_FUZZ") == "slow"
SLOW_EXAMPLES = int(os.environ.get("PROFKIT_FUZZ_EXAMPLES", "2000"))
DEADLINE = timedelta(seconds=30)  # a 2-core CI machine under load; real cases take 0.05-1 s
NSYS_BASE = "nsys2025_sync_apis"  # the smallest real export
HOSTILE = ["'", '"', "\x00", "]]>", "<script>alert(1)</script>", "[x](javascript:alert(1))", "%s%n", "\\",
           "\u202e", "A" * 70_000, "--output=/tmp/pwned", "../../etc/passwd", "\ud800", "DROP TABLE StringIds;--"]

_COUNT = {"cases": 0}
_PER_TEST: dict[str, int] = {}  # cases per fuzz target, for the slow run's note


def fuzz_settings(ci_examples: int) -> Callable:
    # the default run does half the cases named per target (at least 3; the same ones each run:
    # derandomized), to keep the whole suite near 5 minutes on 2 cores; PROFKIT_FUZZ=slow does many
    return settings(max_examples=SLOW_EXAMPLES if SLOW else max(3, ci_examples // 2), deadline=DEADLINE,
                    derandomize=not SLOW, suppress_health_check=list(HealthCheck), database=None)


slow_only = pytest.mark.skipif(not SLOW, reason="the large fuzz run: PROFKIT_FUZZ=slow")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def check_cli(args: list[str], *inputs: Path) -> None:
    """The properties, for one command on one mutated input."""
    _COUNT["cases"] += 1
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[-1].split(" ")[0]
    _PER_TEST[test] = _PER_TEST.get(test, 0) + 1
    before = [sha256(p) for p in inputs]
    result = CliRunner().invoke(cli, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        raise AssertionError("traceback:\n" + "".join(traceback.format_exception(*result.exc_info)))
    assert result.exit_code in (0, 2), (result.exit_code, result.output[-2000:])
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("profkit: error: "), lines
        assert "Traceback" not in result.output
    assert [sha256(p) for p in inputs] == before, "an input changed"


# -- mutations of bytes --------------------------------------------------------------------------
def byte_mutations(size: int) -> st.SearchStrategy:
    flips = st.lists(st.tuples(st.integers(0, max(size - 1, 0)), st.integers(1, 255)), min_size=1, max_size=48)
    return st.one_of(
        st.tuples(st.just("flip"), flips),
        st.tuples(st.just("truncate"), st.integers(0, size)),
        st.tuples(st.just("insert"), st.tuples(st.integers(0, size), st.sampled_from(HOSTILE))),
        st.tuples(st.just("noise"), st.tuples(st.integers(0, size), st.binary(min_size=1, max_size=512))),
    )


def mutate_bytes(data: bytes, mutation: tuple) -> bytes:
    kind, arg = mutation
    if kind == "flip":
        out = bytearray(data)
        for offset, mask in arg:
            if offset < len(out):
                out[offset] ^= mask
        return bytes(out)
    if kind == "truncate":
        return data[:arg]
    offset, piece = arg
    piece = piece.encode("utf-8", "surrogatepass") if isinstance(piece, str) else piece
    return data[:offset] + piece + data[offset:]


# -- nsys SQLite -----------------------------------------------------------------------------------
def _nsys_tables() -> dict[str, list[str]]:
    conn = sqlite3.connect(f"file:{nsys_fixture(NSYS_BASE)}?mode=ro&immutable=1", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')] for t in tables}
    finally:
        conn.close()


NSYS_TABLES = _nsys_tables()
# the tables the summaries read, drawn more often than the 40 enum tables
READ_TABLES = [t for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds",
                           "META_DATA_EXPORT", "TARGET_INFO_GPU", "CUPTI_ACTIVITY_KIND_MEMCPY",
                           "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "ANALYSIS_DETAILS", "META_DATA_CAPTURE",
                           "ENUM_CUDA_MEMCPY_OPER", "TARGET_INFO_CUDA_DEVICE") if t in NSYS_TABLES]


@st.composite
def sql_mutation(draw: st.DrawFn) -> tuple:
    table = draw(st.sampled_from(READ_TABLES) if draw(st.booleans()) else st.sampled_from(sorted(NSYS_TABLES)))
    column = draw(st.sampled_from(NSYS_TABLES[table]))
    kind = draw(st.sampled_from(["drop_table", "drop_column", "nulls", "huge_string", "hostile_text",
                                 "not_utf8", "type_swap", "negative", "rename_table", "empty_table"]))
    return kind, table, column, draw(st.sampled_from(HOSTILE)), draw(st.integers(-2**63, 2**63 - 1))


def _name(text: str) -> str:
    """A hostile table name SQLite accepts (no NUL, no lone surrogate), quotes doubled."""
    return text.replace("\x00", "").encode("utf-8", "replace").decode().replace('"', '""')


def apply_sql_mutation(path: Path, mutation: tuple) -> None:
    kind, table, column, text, number = mutation
    conn = sqlite3.connect(path)
    t, c = table.replace('"', '""'), column.replace('"', '""')
    statements = {
        "drop_table": [f'DROP TABLE "{t}"'],
        "drop_column": [f'ALTER TABLE "{t}" DROP COLUMN "{c}"'],
        "nulls": [f'UPDATE "{t}" SET "{c}" = NULL'],
        "huge_string": [f'UPDATE "{t}" SET "{c}" = ? WHERE rowid IN (SELECT rowid FROM "{t}" LIMIT 3)'],
        "hostile_text": [f'UPDATE "{t}" SET "{c}" = CAST(? AS TEXT)'],
        "not_utf8": [f'UPDATE "{t}" SET "{c}" = CAST(? AS TEXT)'],
        "type_swap": [f'UPDATE "{t}" SET "{c}" = typeof("{c}") || ?'],
        "negative": [f'UPDATE "{t}" SET "{c}" = ?'],
        "rename_table": [f'ALTER TABLE "{t}" RENAME TO "{_name(t + text[:20])}"'],
        "empty_table": [f'DELETE FROM "{t}"'],
    }[kind]
    params = {"huge_string": ("x" * 5_000_000,), "hostile_text": (text.encode("utf-8", "surrogatepass"),), "not_utf8": (b"\xc6\xff" + text.encode(
        "utf-8", "surrogatepass"),), "type_swap": (text.encode("utf-8", "surrogatepass"),), "negative": (number,)}.get(kind, ())
    try:
        with conn:
            for sql in statements:
                conn.execute(sql, params)
    except sqlite3.Error:
        pass  # a mutation SQLite itself refuses (a column a constraint needs): the copy stays valid
    finally:
        conn.close()


NSYS_COMMANDS = [["kernels"], ["api"], ["nvtx"], ["info"], ["stalls"], ["info", "--format", "json"],
                 ["scrub", "-o", "{dir}/scrubbed.sqlite"]]


def run_nsys_case(tmp: Path, make: Callable[[Path], None], command: list[str]) -> None:
    path = tmp / "mutated.sqlite"
    make(path)
    out_dir = tmp / "out"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir()
    check_cli([command[0], str(path), *[a.format(dir=out_dir) for a in command[1:]]], path)


NSYS_BYTES = nsys_fixture(NSYS_BASE).read_bytes()


def nsys_bytes_case(tmp: Path, mutation: tuple, command: list[str]) -> None:
    run_nsys_case(tmp, lambda p: p.write_bytes(mutate_bytes(NSYS_BYTES, mutation)), command)


def nsys_sql_case(tmp: Path, mutation: tuple, command: list[str]) -> None:
    def make(path: Path) -> None:
        path.write_bytes(NSYS_BYTES)
        apply_sql_mutation(path, mutation)

    run_nsys_case(tmp, make, command)


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@fuzz_settings(15)
@given(mutation=byte_mutations(len(NSYS_BYTES)), command=st.sampled_from(NSYS_COMMANDS))
def test_nsys_bytes(tmp_dir: Path, mutation: tuple, command: list[str]) -> None:
    nsys_bytes_case(tmp_dir, mutation, command)


@fuzz_settings(15)
@given(mutation=sql_mutation(), command=st.sampled_from(NSYS_COMMANDS))
def test_nsys_tables(tmp_dir: Path, mutation: tuple, command: list[str]) -> None:
    nsys_sql_case(tmp_dir, mutation, command)


# -- ncu CSV -------------------------------------------------------------------------------------------
NCU_BYTES = ncu_fixture("matmul_raw_import.csv").read_bytes()


@fuzz_settings(15)
@given(mutation=byte_mutations(len(NCU_BYTES)))
def test_ncu_csv(tmp_dir: Path, mutation: tuple) -> None:
    path = tmp_dir / "mutated_ncu.csv"
    path.write_bytes(mutate_bytes(NCU_BYTES, mutation))
    check_cli(["occupancy", "--ncu", str(path), "--format", "json"], path)


# -- PTX (a real Triton kernel from the committed torch.compile cache) -------------------------------
def _real_ptx() -> bytes:
    with tarfile.open(fileobj=lzma.open(DATA / "ptx" / "inductor_cache.tar.xz")) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".ptx"))
        return tar.extractfile(member).read()


PTX_BYTES = _real_ptx()


@fuzz_settings(5)
@given(mutation=byte_mutations(len(PTX_BYTES)))
def test_ptx_text(tmp_dir: Path, mutation: tuple) -> None:
    path = tmp_dir / "mutated.ptx"
    path.write_bytes(mutate_bytes(PTX_BYTES, mutation))
    check_cli(["ptx", str(path), "--summary-only", "--format", "json", "--no-cache"], path)


# -- run.json in a run folder ---------------------------------------------------------------------------
RUN_JSON = json.dumps({"command": ["train.py"], "cwd": "/work/main", "status": "ok", "files": {"sqlite": "trace.sqlite"}},
                      indent=2).encode()


@fuzz_settings(5)
@given(mutation=byte_mutations(len(RUN_JSON)) | st.tuples(st.just("json"), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["cwd", "command", "files", "x"]),
                                                                 inner, max_size=4), max_leaves=10)))
def test_run_json(tmp_dir: Path, mutation: tuple) -> None:
    run = tmp_dir / "run"
    run.mkdir(exist_ok=True)
    if not (run / "trace.sqlite").exists():
        shutil.copyfile(nsys_fixture("nsys2025_sync"), run / "trace.sqlite")
    data = json.dumps(mutation[1]).encode() if mutation[0] == "json" else mutate_bytes(RUN_JSON, mutation)
    (run / "run.json").write_bytes(data)
    check_cli(["stalls", str(run), "--format", "json"], run / "run.json", run / "trace.sqlite")


# -- Kineto JSON (synthetic base trace: the reader's bad-input tests use the same shape) ------------
def synthetic_kineto() -> bytes:
    def event(cat: str, name: str, ts: float, dur: float, **args: object) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}

    events = [event("cuda_runtime", "cudaLaunchKernel", 10.0 + i * 20, 5.0, correlation=i) for i in range(5)]
    events += [event("kernel", f"k{i % 2}", 20.0 + i * 20, 3.5, device=0, stream=7, correlation=i,
                     grid=[1, 1, 1], block=[32, 1, 1]) for i in range(5)]
    events += [event("cpu_op", "aten::add", 9.0, 8.0, **{"External id": 3}),
               event("user_annotation", "ProfilerStep#1", 0.0, 100.0)]
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "numSms": 132}],
           "traceEvents": events, "traceName": "synthetic"}
    return json.dumps(doc).encode()


KINETO_BYTES = synthetic_kineto()


@fuzz_settings(15)
@given(mutation=byte_mutations(len(KINETO_BYTES)), packed=st.booleans(),
       command=st.sampled_from([["kernels"], ["api"], ["nvtx"], ["info"], ["scrub", "-o", "{dir}/s.json"]]))
def test_kineto_json(tmp_dir: Path, mutation: tuple, packed: bool, command: list[str]) -> None:
    data = mutate_bytes(KINETO_BYTES, mutation)
    path = tmp_dir / ("synthetic_mutated.json.gz" if packed else "synthetic_mutated.json")
    path.write_bytes(gzip.compress(data) if packed else data)
    out_dir = tmp_dir / "kout"
    out_dir.mkdir(exist_ok=True)
    check_cli([command[0], str(path), *[a.format(dir=out_dir) for a in command[1:]]], path)


# -- hostile shapes (issue 25): long names, bombs, views, deep nesting, control characters ----------
CONTROL = st.lists(st.sampled_from(["\x1b[2J", "\x1b]8;;http://x\x1b\\", "\r", "\n", "\x00", "\x9b", "\x07", "=", "+",
                                   "-", "@", "a", "(", ")", "<", ">", "[lambda(", "::", " -> "]), max_size=40).map("".join)


@st.composite
def hostile_kineto(draw: st.DrawFn) -> tuple[str, object]:
    kind = draw(st.sampled_from(["long_name", "control", "deep", "bomb", "events"]))
    if kind == "long_name":  # a repeated unit, up to 256 kB: the patterns that used to backtrack
        unit = draw(st.sampled_from(["a", "(", "(a", "[lambda(", "<", "1ul", ", void ", "a::", "x@y."]))
        return kind, "void f<(" + unit * draw(st.integers(1, (256 << 10) // len(unit))) + ">(int)"
    if kind == "control":
        return kind, draw(CONTROL)
    if kind == "deep":
        return kind, draw(st.integers(1, 1500))
    if kind == "bomb":
        return kind, draw(st.integers(1, 80)) << 20  # whitespace bytes
    return kind, draw(st.integers(1, 400_000))  # tiny events


def hostile_kineto_bytes(kind: str, value: object) -> bytes:
    doc = json.loads(KINETO_BYTES)
    events = doc["traceEvents"]
    if kind in ("long_name", "control"):
        for e in events:
            if e["name"] == "k0" or e["cat"] == "user_annotation":
                e["name"] = value
        return json.dumps(doc, indent=1).encode()
    if kind == "deep":
        depth = int(value)  # type: ignore[arg-type]
        return json.dumps(doc, indent=1).replace('"correlation": 0', '"deep": ' + "[" * depth + "]" * depth
                                                 + ', "correlation": 0', 1).encode()
    text = json.dumps(doc, indent=1)
    at = text.index('"traceEvents": [') + len('"traceEvents": [')
    filler = " " * int(value) if kind == "bomb" else "{}, " * int(value)  # type: ignore[arg-type]
    return (text[:at] + filler + text[at:]).encode()


@fuzz_settings(10)
@given(case=hostile_kineto(), command=st.sampled_from([["kernels", "--wide"], ["kernels", "--format", "csv"], ["nvtx"],
                                                      ["report", "-o", "{dir}"], ["scrub", "-o", "{dir}/s.json.gz"]]))
def test_kineto_hostile_shapes(tmp_dir: Path, case: tuple[str, object], command: list[str]) -> None:
    path = tmp_dir / "hostile_synthetic.json.gz"
    path.write_bytes(gzip.compress(hostile_kineto_bytes(*case), 6))
    out_dir = tmp_dir / "hout"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir()
    check_cli([command[0], str(path), *[a.format(dir=out_dir) for a in command[1:]]], path)


@fuzz_settings(6)
@given(view=st.sampled_from(["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds"]),
       command=st.sampled_from(NSYS_COMMANDS))
def test_nsys_endless_view(tmp_dir: Path, view: str, command: list[str]) -> None:
    """A table replaced by a view over an endless recursive CTE: views are never read."""
    def make(path: Path) -> None:
        path.write_bytes(NSYS_BYTES)
        conn = sqlite3.connect(path)
        with conn:
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({view})")]
            conn.execute(f"DROP TABLE {view}")
            select = ", ".join(f"n AS {c}" for c in columns)
            conn.execute(f"CREATE VIEW {view} AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
                         f"SELECT {select} FROM r")
        conn.close()

    run_nsys_case(tmp_dir, make, command)


# -- the large run ---------------------------------------------------------------------------------------
@pytest.mark.slow
@slow_only
def test_slow_run_count() -> None:
    """Runs last in the file under -m slow: the number of cases the run made, for the note."""
    print(f"\nfuzz cases run: {_COUNT['cases']}")
    for test, count in sorted(_PER_TEST.items()):
        print(f"  {test}: {count}")


# -- crashes the large run found (regressions) ---------------------------------------------------------
def test_text_in_an_integer_column_is_one_line(tmp_dir: Path) -> None:
    """numpy failed to parse a kernel 'start' holding text (ValueError traceback)."""
    nsys_sql_case(tmp_dir, ("huge_string", "CUPTI_ACTIVITY_KIND_KERNEL", "start", "'", 0), ["info"])
    nsys_sql_case(tmp_dir, ("hostile_text", "CUPTI_ACTIVITY_KIND_KERNEL", "end", "'", 0), ["kernels"])


def test_null_capture_settings_are_one_line_or_a_result(tmp_dir: Path) -> None:
    """META_DATA_CAPTURE values NULL: None.lower() in the trace metadata (AttributeError traceback)."""
    for command in (["kernels"], ["info"]):
        nsys_sql_case(tmp_dir, ("nulls", "META_DATA_CAPTURE", "value", "'", 0), command)


def test_text_capture_window_is_one_line_or_a_result(tmp_dir: Path) -> None:
    """ANALYSIS_DETAILS.startTime holding text: int('xxx') in the trace metadata (ValueError traceback)."""
    for command in (["kernels"], ["info"]):
        nsys_sql_case(tmp_dir, ("huge_string", "ANALYSIS_DETAILS", "startTime", "'", 0), command)


@pytest.mark.parametrize("packed", [False, True])
def test_kineto_bytes_not_utf8_is_one_line(tmp_dir: Path, packed: bool) -> None:
    """msgspec raised UnicodeDecodeError for a string that is not UTF-8."""
    test_kineto_json.hypothesis.inner_test(tmp_dir, ("noise", (76, b"\x80")), packed, ["kernels"])
