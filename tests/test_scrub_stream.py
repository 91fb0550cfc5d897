"""`profkit scrub` of a Kineto trace streams: chunk by chunk, in bounded memory, the same copy.

The streaming pass is made to cut a real trace (mlp_print, with Python stacks)
into ~70 chunks by shrinking its read block; secrets are planted in the middle
of the events (a value, a key, a string with escaped quotes, a \\u-escaped
value) and an environment after them, so each path of the pass runs: the chunk
written as read, the chunk walked, the second pass for a late environment.
"""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from profkit.analysis.kernels import summaries
from profkit.readers import open_trace
from profkit.scrub import kineto as kineto_scrub
from profkit.readers.kineto.parse import _separator
from profkit.scrub import scrub
from tests import planted
from tests.conftest import DATA

STACKS = DATA / "kineto" / "mlp_print.json.gz"  # torch.profiler with_stack=True: 8,723 python_function events


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_scrub, "BLOCK", 64 << 10)


def _decoded(path: Path) -> Any:
    return json.loads(gzip.decompress(path.read_bytes()))


def _kineto_layout(doc: dict[str, Any], tail: dict[str, Any]) -> bytes:
    """``doc``'s keys, its events one per block at indent 2 (Kineto's C++ writer), then ``tail``'s keys."""
    head = "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in doc.items() if k != "traceEvents")
    events = ",\n".join("  {\n    " + json.dumps(e)[1:-1] + "\n  }" for e in doc["traceEvents"])
    after = "".join(f",\n  {json.dumps(k)}: {json.dumps(v)}" for k, v in tail.items())
    return ("{\n" + head + '  "traceEvents": [\n' + events + "\n  ]" + after + "\n}\n").encode()


def test_a_real_trace_cut_in_chunks_is_copied_unchanged(small_blocks: None, tmp_path: Path) -> None:
    out = tmp_path / "shared.json.gz"
    removed = scrub(STACKS, out)
    assert removed == {}
    assert _decoded(out) == _decoded(STACKS)
    copy = gzip.decompress(out.read_bytes())
    original = gzip.decompress(STACKS.read_bytes())
    start = copy.find(b"[", copy.find(b'"traceEvents"')) + 1
    # joined as the input joins its events, so the reader cuts the copy the same way
    assert _separator(copy[start:start + 4096]) == _separator(original[original.find(b"[", 100) + 1:][:4096])
    with open_trace(STACKS) as before, open_trace(out) as after:
        assert summaries.kernel_summary(after) == summaries.kernel_summary(before)


def test_secrets_planted_mid_stream_and_a_late_environment_go(small_blocks: None, tmp_path: Path) -> None:
    doc = _decoded(STACKS)
    events = doc["traceEvents"]
    middle = len(events) // 2
    ops = [i for i, e in enumerate(events) if isinstance(e.get("args"), dict) and i > middle][:3]
    events[ops[0]]["args"]["note"] = f"upload {planted.SECRET}"  # a value: the recorded environment's secret
    events[ops[1]]["args"][f"token={planted.SECRET}"] = 1  # a key
    events[ops[2]]["name"] = f'say "hi" --password {planted.SECRET}'  # escaped quotes: the walked path
    events.append({"ph": "i", "name": "ghp_" + "a1" * 18, "ts": 0, "pid": 0, "tid": 0})
    # an environment after the events: known only once every event was written
    tail = {"metadata": {"env": {planted.SECRET_VARIABLE: planted.SECRET, "HOME": planted.HOME}},
            "stack": f"{planted.HOME}/train.py(3): main"}
    source = tmp_path / "planted.json.gz"
    source.write_bytes(gzip.compress(_kineto_layout(doc, tail), 1))
    out = tmp_path / "shared.json.gz"
    removed = scrub(source, out, anonymize=True)
    data = gzip.decompress(out.read_bytes())
    for value in (planted.SECRET, "ghp_" + "a1" * 18, planted.USER, "HOME"):
        assert value.encode() not in data, value
    assert removed["environment members"] == 1 and removed["secret values"] >= 3
    assert removed["credential-shaped strings"] == 1
    shared = json.loads(data)
    assert len(shared["traceEvents"]) == len(events)
    assert shared["traceEvents"][ops[2]]["name"] == 'say "hi" --password [redacted]'
    assert "env" not in shared["metadata"] and shared["stack"] == "/home/user1/train.py(3): main"
    untouched = [i for i in range(len(events)) if i not in ops and i != len(events) - 1]
    assert [shared["traceEvents"][i] for i in untouched] == [events[i] for i in untouched]


def test_an_escaped_secret_is_judged_by_its_text(small_blocks: None, tmp_path: Path) -> None:
    doc = _decoded(STACKS)
    doc["traceEvents"][len(doc["traceEvents"]) // 2]["name"] = "ghp_" + "b2" * 18
    raw = _kineto_layout(doc, {}).replace(b"ghp_", b"\\u0067hp_")  # the same string, spelled with an escape
    source = tmp_path / "escaped.json"
    source.write_bytes(raw)
    out = tmp_path / "shared.json"
    assert scrub(source, out)["credential-shaped strings"] == 1
    assert "b2" * 18 not in json.loads(out.read_bytes())["traceEvents"][len(doc["traceEvents"]) // 2]["name"]


def test_memory_stays_bounded_by_the_chunk(small_blocks: None, tmp_path: Path) -> None:
    raw = gzip.decompress(STACKS.read_bytes())
    tracemalloc.start()
    try:
        scrub(STACKS, tmp_path / "shared.json.gz")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the whole document decoded takes ~10x its JSON; a stream of 64 KiB blocks a small part of it
    assert peak < len(raw) / 2, (peak, len(raw))


def test_one_line_json_is_scrubbed_whole(tmp_path: Path) -> None:
    doc = _decoded(STACKS)
    doc["traceEvents"][5]["name"] = f"x --password {planted.SECRET}"
    source = tmp_path / "one_line.json"
    source.write_text(json.dumps(doc))
    out = tmp_path / "shared.json"
    assert scrub(source, out)["--name value options"] == 1
    shared = json.loads(out.read_bytes())
    assert shared["traceEvents"][5]["name"] == "x --password [redacted]"
    assert shared["traceEvents"][6:] == doc["traceEvents"][6:]
