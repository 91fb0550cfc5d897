"""Issue 34, part A: NVTX payloads, NCCL payloads, rank splitting and Kineto stacks from strangers.

Each recipe is a real capture with a few rows or bytes changed (tests/hostile_payloads.py), run as
a user would (a fresh ``python -m profkit`` process, timed, its peak RSS read with getrusage): it
ends within 30 s and 1.5 GB, with a result or one line and exit 2, never a traceback.  What the
decoder refuses it says once, and the rest of the trace is still read.
"""

from __future__ import annotations

import json
import os
import struct
import time
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profkit.errors import ProfkitWarning
from profkit.readers.nsys.payloads import (
    MAX_NESTING, REGISTERED_STRING_HANDLE, SCALAR_FORMATS, Entry, PayloadEnum, PayloadSchema, PayloadSchemas,
    read_schemas,
)
from profkit.readers.nsys.reader import open_export
from tests import hostile_payloads as hp

ROOT = Path(__file__).resolve().parent.parent
SECONDS = 30
PEAK_MB = 1536
# examples per fuzz test: a few seconds on every run; benchmarks/hostile_payloads.py --fuzz-examples runs more
FUZZ_EXAMPLES = int(os.environ.get("PROFKIT_FUZZ_EXAMPLES", "150"))


def run(argv: list[str], **env: str) -> dict:
    result = hp.measure(argv, {**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=90)
    assert "Traceback" not in result["stderr"], result["stderr"]
    assert result["seconds"] < SECONDS and result["peak_mb"] < PEAK_MB, (result["seconds"], result["peak_mb"])
    return result


def strict_json(text: str) -> object:
    """JSON as the standard says it: NaN and Infinity are refused."""
    def reject(constant: str) -> None:
        raise ValueError(f"{constant} in JSON output")
    return json.loads(text, parse_constant=reject)


def lines(text: str) -> list[str]:
    return text.strip().splitlines()


def one_line_error(result: dict, *words: str) -> None:
    err = lines(result["stderr"])
    assert result["code"] == 2 and len(err) == 1 and err[0].startswith("profkit: error: "), result["stderr"]
    for word in words:
        assert word in err[0]


def warned(result: dict, *words: str) -> None:
    """A result, and one warning line that names what was skipped."""
    assert result["code"] == 0, result["stderr"]
    found = [line for line in lines(result["stderr"]) if line.startswith("profkit: warning: ")]
    assert len(found) == 1 and all(w in found[0] for w in words), result["stderr"]


# -- nsys Python samples (`profkit host`) ---------------------------------------------------------
def test_a_count_of_2_62_items_of_size_minus_one_is_one_line(tmp_path: Path) -> None:
    one_line_error(run(["host", str(hp.samples_count_past_blob(tmp_path, every=True))]), "Python Periodic Sampling")


def test_one_sample_past_its_blob_is_skipped_and_the_rest_read(tmp_path: Path) -> None:
    result = run(["host", str(hp.samples_count_past_blob(tmp_path, every=False)), "--format", "json"])
    warned(result, "1 Python samples skipped", "run past a payload")
    intact = run(["host", str(hp.copy(hp.PYTHON_SAMPLES, tmp_path / "intact.sqlite")), "--format", "json"])
    assert strict_json(result["stdout"])["summary"]["main_tid"] == strict_json(intact["stdout"])["summary"]["main_tid"]


def test_a_schema_nested_in_itself_is_found_before_decoding(tmp_path: Path) -> None:
    path = hp.samples_self_reference(tmp_path)
    with pytest.warns(ProfkitWarning, match="nested in itself"):
        schemas = read_schemas(open_export(path))
    assert len(schemas.invalid) == 2 and all("nested in itself" in why for why in schemas.invalid.values())
    one_line_error(run(["host", str(path)]), "Python Periodic Sampling")


def test_text_and_null_blobs_and_a_null_thread_are_skipped(tmp_path: Path) -> None:
    warned(run(["host", str(hp.samples_bad_rows(tmp_path))]), "2 Python samples skipped", "str, not bytes")


def test_a_string_handle_of_2_64_minus_1_is_an_unknown_name(tmp_path: Path) -> None:
    result = run(["host", str(hp.samples_huge_string_handle(tmp_path)), "--format", "json"])
    assert result["code"] == 0 and strict_json(result["stdout"])["functions"], result["stderr"]


@pytest.mark.parametrize("tag", hp.SCHEMA_EDITS)
def test_one_schema_cell_changed_is_one_line(tmp_path: Path, tag: str) -> None:
    one_line_error(run(["host", str(hp.samples_schema_edit(tmp_path, tag))]), "Python Periodic Sampling")


# -- NCCL payloads (`ranks`, `report`) -------------------------------------------------------------
def test_an_nccl_array_past_its_blob_skips_that_schema_only(tmp_path: Path) -> None:
    result = run(["ranks", str(hp.nccl_count_past_blob(tmp_path)), "--format", "json"])
    assert result["code"] == 0 and "payloadSize -1" in result["stderr"], result["stderr"]
    assert len(strict_json(result["stdout"])) == 2  # both ranks, from NCCL's other init schema


def test_nranks_of_2_31_minus_1_is_no_rank_count(tmp_path: Path) -> None:
    result = run(["ranks", str(hp.nccl_nranks(tmp_path)), "--format", "json"])
    warned(result, "NCCL payloads skipped", "2,147,483,647 ranks")
    assert len(strict_json(result["stdout"])) == 2


@pytest.mark.parametrize("command", ["ranks", "report"])
def test_a_message_of_2_64_minus_1_bytes_is_no_size(tmp_path: Path, command: str) -> None:
    path = hp.nccl_message_size(tmp_path)
    argv = [command, str(path)] + (["-o", str(tmp_path / "out")] if command == "report" else ["--format", "json"])
    warned(run(argv), "NCCL collective payloads skipped", "18,446,744,073,709,551,615 bytes")


# -- rank splitting ----------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["ranks", "report", "steps"])
def test_3000_ranks_in_one_file_are_refused(tmp_path: Path, command: str) -> None:
    path = hp.kernels_own_process(tmp_path, 3000)
    result = run([command, str(path)] + (["-o", str(tmp_path / "out")] if command == "report" else []))
    last = lines(result["stderr"])[-1]
    assert result["code"] == 2 and last.startswith("profkit: error: ") and "PROFKIT_MAX_RANKS" in last
    if command != "ranks":  # ranks also names each file it could not read, as for any file
        one_line_error(result, "3,002 ranks")


def test_the_rank_limit_is_the_variable(tmp_path: Path) -> None:
    path = hp.kernels_own_process(tmp_path, 10)  # 12 ranks: the 2 real ones and 10 crafted
    one_line_error(run(["steps", str(path)], PROFKIT_MAX_RANKS="11"), "12 ranks", "PROFKIT_MAX_RANKS")
    assert run(["steps", str(path)], PROFKIT_MAX_RANKS="12")["code"] == 0


@pytest.mark.slow
def test_300000_ranks_are_refused_in_seconds(tmp_path: Path) -> None:
    one_line_error(run(["steps", str(hp.kernels_own_process(tmp_path, 300_000))]), "PROFKIT_MAX_RANKS")


# -- Kineto stacks (`host`) -------------------------------------------------------------------------
def test_a_line_of_5000_digits_is_an_unknown_line(tmp_path: Path) -> None:
    result = run(["host", str(hp.kineto_long_line(tmp_path)), "--format", "json"])
    assert result["code"] == 0, result["stderr"]
    assert {f["line"] for f in strict_json(result["stdout"])["functions"] if f["file"].endswith("hf_llama.py")} == {-1}


def test_40000_threads_of_one_frame_each(tmp_path: Path) -> None:
    # the crafted threads' frames lie at the trace's start, in its warm-up: every step is asked for
    result = run(["host", str(hp.kineto_many_threads(tmp_path)), "--all-steps", "--format", "json"])
    assert result["code"] == 0, result["stderr"]
    assert len({r["tid"] for r in strict_json(result["stdout"])["other_threads"]}) > 1000


# -- the decoder, on hand-built schemas (scale and shape tests) -------------------------------------
S = 1 << 24  # NVTX's first static schema id: types below are NVTX's own


def _chain(depth: int) -> dict:
    """Schema S holds S + 1, which holds S + 2, ..., the last an int."""
    return {(1, S + k): PayloadSchema(1, S + k, "", 4, (Entry(0, "x", S + k + 1 if k < depth - 1 else 5, 0, 0, None),))
            for k in range(depth)}


def test_a_chain_of_100000_nested_schemas_costs_no_recursion() -> None:
    started = time.perf_counter()
    with pytest.warns(ProfkitWarning) as caught:
        decoded = PayloadSchemas(_chain(100_000), {})
    assert time.perf_counter() - started < 10
    outermost_kept = min(k for k in range(100_000) if (1, S + k) not in decoded.invalid)
    assert outermost_kept == 100_000 - MAX_NESTING  # its int is MAX_NESTING levels down
    assert "nests schemas more than 32 deep" in str(caught[0].message)
    assert len(caught) == 6 and "99,963 more NVTX payload schemas are skipped" in str(caught[-1].message)


def test_a_chain_of_32_nested_schemas_decodes() -> None:
    decoded = PayloadSchemas(_chain(MAX_NESTING), {})
    assert not decoded.invalid
    value = decoded.decode(struct.pack("<QQQQ", 1, S, 4, 32) + struct.pack("<i", 7), 1)[0][1]
    for _ in range(MAX_NESTING - 1):
        value = value["x"]
    assert value == {"x": 7}


def test_a_cycle_of_two_schemas_is_skipped_with_one_warning_each() -> None:
    schemas = {(1, S): PayloadSchema(1, S, "a", 8, (Entry(0, "b", S + 1, 0, 0, None),)),
               (1, S + 1): PayloadSchema(1, S + 1, "b", 8, (Entry(0, "a", S, 0, 0, None),)),
               (1, S + 2): PayloadSchema(1, S + 2, "fine", 8, (Entry(0, "n", 18, 0, 0, None),))}
    with pytest.warns(ProfkitWarning) as caught:
        decoded = PayloadSchemas(schemas, {})
    assert len(caught) == 2 and set(decoded.invalid) == {(1, S), (1, S + 1)}
    blob = struct.pack("<Q", 2) + struct.pack("<QQQ", S, 8, 56) + struct.pack("<QQQ", S + 2, 8, 64) + \
        struct.pack("<QQ", 1, 9)
    assert [(s.name, v) for s, v in decoded.decode(blob, 1)] == [("fine", {"n": 9})]


def test_what_the_fuzzer_found_is_skipped_not_allocated() -> None:
    """Schemas made in code, not read from a file: a size or offset of 2**62 built a 2**62-byte
    struct format (MemoryError), a None flag or offset was a TypeError."""
    found = {(1, S): PayloadSchema(1, S, "", 1 << 62, (Entry(0, "n", 5, 0, 0, None),)),
             (1, S + 1): PayloadSchema(1, S + 1, "", None, (Entry(0, "n", 5, 0, 1 << 62, None),)),
             (1, S + 2): PayloadSchema(1, S + 2, "", 4, (Entry(0, "n", 5, None, None, None),))}
    with pytest.warns(ProfkitWarning):
        decoded = PayloadSchemas(found, {})
    assert set(decoded.invalid) == set(found)


# -- fuzzing: schemas and blobs shaped like nsys's, with any value in any cell ----------------------
TYPES = st.one_of(st.sampled_from([*SCALAR_FORMATS, REGISTERED_STRING_HANDLE, 21, 0, -1]),
                  st.integers(S, S + 5), st.integers(-(1 << 63), (1 << 63) - 1))
CELL = st.one_of(st.none(), st.integers(-3, 64), st.sampled_from([1 << 62, -(1 << 62), (1 << 63) - 1]))


WIDTH = {t: struct.calcsize("<" + code) for t, code in SCALAR_FORMATS.items()}


@st.composite
def schema_sets(draw: st.DrawFn) -> tuple[dict, dict]:
    """Up to 5 schemas laid out as NVTX lays them: entries one after the other (scalars, string
    handles, the enum, fixed-size schemas declared after this one, and arrays of any of these
    counted by an integer before them), each set at times with one cell replaced by anything."""
    schemas: dict = {}
    count = draw(st.integers(1, 5))
    sizes: dict[int, int] = {}  # fixed-size schemas built so far (the later ones): their sizes
    for k in reversed(range(count)):
        entries, at, integers = [], 0, []
        for i in range(draw(st.integers(0, 4))):
            kinds = ["scalar", "string", "enum", "array"] + (["nested"] if sizes else [])
            kind = draw(st.sampled_from(kinds))
            flags, detail = 0, None
            if kind == "nested" or (kind == "array" and sizes and draw(st.booleans())):
                child = draw(st.sampled_from(sorted(sizes)))
                type_, width = S + child, sizes[child]
            elif kind == "enum":
                type_, width = S + 5, 4
            elif kind == "string":
                type_, width = REGISTERED_STRING_HANDLE, 8
            else:
                type_ = draw(st.sampled_from(sorted(WIDTH)))
                width = WIDTH[type_]
            if kind == "array" and integers:
                flags, detail = 48, draw(st.sampled_from(integers))
            elif type_ in WIDTH and SCALAR_FORMATS[type_] not in "fd":
                integers.append(i)
            entries.append(Entry(i, f"e{i}", type_, flags, at, detail))
            at += width
        if entries and draw(st.integers(0, 3)) == 0:  # one cell of one entry changed to anything
            i = draw(st.integers(0, len(entries) - 1))
            field = draw(st.sampled_from(["type", "flags", "offset", "array_detail"]))
            entries[i] = Entry(**{**entries[i].__dict__, field: draw(TYPES if field == "type" else CELL)})
        size = None if any(e.flags for e in entries) else draw(st.sampled_from([at, at, at + 8]) | CELL)
        if size is not None and size == at and at > 0:
            sizes[k] = size
        schemas[(1, S + k)] = PayloadSchema(1, S + k, "", size, tuple(entries))
    enums = {(1, S + 5): PayloadEnum(1, S + 5, draw(st.sampled_from([4, 4, 1, 2, 3, 8, 0])), {1: "one"})}
    return schemas, enums


def _blob(data: st.DataObject, schemas: dict) -> bytes:
    """nsys's layout (count, then (schema, size, offset) each, then the payloads), well formed, of
    payloads of the declared schemas with small array counts; at times one number of it replaced by
    anything."""
    bodies, ids = [], []
    for _ in range(data.draw(st.integers(0, 3))):
        key = data.draw(st.sampled_from(sorted(schemas)))
        body = bytearray(data.draw(st.binary(min_size=0, max_size=256) | st.binary(min_size=96, max_size=256)))
        entries = {e.index: e for e in schemas[key].entries if isinstance(e.index, int)}
        for entry in schemas[key].entries:
            counter = entries.get(entry.array_detail) if entry.flags == 48 else None
            if counter is not None and counter.type in WIDTH and isinstance(counter.offset, int) and \
                    0 <= counter.offset <= len(body) - WIDTH[counter.type]:
                small = data.draw(st.integers(0, 4)).to_bytes(WIDTH[counter.type], "little")
                body[counter.offset:counter.offset + WIDTH[counter.type]] = small
        bodies.append(bytes(body))
        ids.append(key[1])
    numbers, at = [len(bodies)], 8 + 24 * len(bodies)
    for schema_id, body in zip(ids, bodies):
        numbers += [schema_id, len(body), at]
        at += len(body)
    if data.draw(st.integers(0, 3)) == 0:
        numbers[data.draw(st.integers(0, len(numbers) - 1))] = data.draw(st.integers(0, (1 << 64) - 1) |
                                                                        st.integers(0, 200))
    return struct.pack(f"<{len(numbers)}Q", *numbers) + b"".join(bodies)


@settings(max_examples=2 * FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema_sets(), st.data())
def test_fuzzed_schemas_and_blobs_decode_or_are_skipped(found: tuple[dict, dict], data: st.DataObject) -> None:
    schemas, enums = found
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfkitWarning)
        decoded = PayloadSchemas(schemas, enums)
        for _ in range(data.draw(st.integers(1, 4))):
            blob = _blob(data, schemas)
            for _, values in decoded.decode_or_skip(blob, 1):
                # every value read came out of the blob: never more items than bytes
                assert _count(values) <= len(blob)
    assert time.perf_counter() - started < 2


def _count(value: object) -> int:
    todo, seen = [value], 0
    while todo:
        item = todo.pop()
        seen += 1
        if isinstance(item, dict):
            todo += item.values()
        elif isinstance(item, list):
            todo += item
    return seen - 1


class _Rows:
    """An export's payload tables as read_schemas asks for them (rows given, no file)."""

    def __init__(self, tables: dict[str, list[tuple]]) -> None:
        self.tables = tables

    def has_table(self, name: str) -> bool:
        return name in self.tables

    def rows(self, sql: str) -> list[tuple]:
        return next(rows for name, rows in sorted(self.tables.items(), key=lambda t: -len(t[0]))
                    if f"FROM {name}" in sql)


SCHEMA_QUERIES = {
    "NVTX_PAYLOAD_SCHEMA_ENTRIES": "SELECT domainId, schemaId, idx, flags, type, name, arrayOrUnionDetail, offset "
                                   "FROM NVTX_PAYLOAD_SCHEMA_ENTRIES ORDER BY domainId, schemaId, idx",
    "NVTX_PAYLOAD_SCHEMAS": "SELECT domainId, schemaId, name, payloadSize FROM NVTX_PAYLOAD_SCHEMAS",
    "NVTX_PAYLOAD_ENUM_ENTRIES": "SELECT domainId, schemaId, name, value FROM NVTX_PAYLOAD_ENUM_ENTRIES",
    "NVTX_PAYLOAD_ENUMS": "SELECT domainId, schemaId, size FROM NVTX_PAYLOAD_ENUMS",
}


@pytest.fixture(scope="module")
def sampling_export() -> tuple[dict[str, list[tuple]], list[bytes]]:
    """The real Python-sampling export's schema rows and its first 200 sample blobs."""
    export = open_export(hp._decompressed(hp.PYTHON_SAMPLES))
    tables = {name: export.rows(sql) for name, sql in SCHEMA_QUERIES.items()}
    blobs = [r[0] for r in export.rows("SELECT binaryData FROM NVTX_EVENTS WHERE eventType = 34 AND "
                                       "binaryData IS NOT NULL ORDER BY start LIMIT 200")]
    export.close()
    return tables, blobs


HOSTILE_CELLS = st.one_of(st.none(), st.integers(-(1 << 63), (1 << 63) - 1), st.sampled_from([-1, 0, 1 << 62]),
                          st.floats(allow_nan=True), st.text(max_size=5), st.binary(max_size=5))


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzzed_cells_of_real_schemas_and_bytes_of_real_blobs(sampling_export: tuple, data: st.DataObject) -> None:
    tables, real_blobs = sampling_export
    tables = {name: list(rows) for name, rows in tables.items()}
    for _ in range(data.draw(st.integers(0, 3))):  # a few schema cells changed to anything SQLite can hold
        name = data.draw(st.sampled_from(sorted(tables)))
        if tables[name]:
            at = data.draw(st.integers(0, len(tables[name]) - 1))
            row = list(tables[name][at])
            row[data.draw(st.integers(0, len(row) - 1))] = data.draw(HOSTILE_CELLS)
            tables[name][at] = tuple(row)
    blob = bytearray(data.draw(st.sampled_from(real_blobs)))
    for _ in range(data.draw(st.integers(0, 4))):  # a few bytes of a real blob changed
        blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    blob = blob[:data.draw(st.integers(0, len(blob)))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfkitWarning)
        decoded = read_schemas(_Rows(tables))
        for domain in (1, -2):
            for _, values in decoded.decode_or_skip(bytes(blob), domain):
                assert _count(values) <= len(blob)


def test_other_threads_in_one_pass_are_one_thread_at_a_time(tmp_path: Path) -> None:
    from profkit.analysis.host.attribution import _thread_rows, host_time, host_windows
    from profkit.analysis.steps import find_steps
    from profkit.readers import open_trace

    trace = open_trace(hp.kineto_threads_copied(tmp_path))
    result = host_time(trace)
    frames = trace.table("python_frames")
    steps = find_steps(trace)
    lo, hi, _ = host_windows(steps.steps, steps.steady)  # self time: the steps' host ranges
    n = len(lo)
    expected = []
    # host_time's order of threads (a tie in the final sort keeps it)
    for pid, tid in sorted(set(zip(frames["pid"].tolist(), frames["tid"].tolist())), key=lambda t: t != result.main):
        if (pid, tid) != result.main:
            rows, _, _ = _thread_rows(frames[(frames["pid"] == pid) & (frames["tid"] == tid)], lo, hi,
                                      *result.idle, n)
            expected += [{"tid": tid, **r} for r in rows if r["self_ns_per_step"] > 0]
    expected.sort(key=lambda r: (-r["gpu_idle_ns_per_step"], -r["self_ns_per_step"]))
    assert len(result.other_threads) == len(expected) > 500

    def but_line(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "line"} for r in rows]
    assert but_line(result.other_threads) == but_line(expected)
    # a line is the one of most self time; where two tie, pandas' unstable sort picked either
    same = sum(a["line"] == b["line"] for a, b in zip(result.other_threads, expected))
    assert same >= len(expected) - 3
