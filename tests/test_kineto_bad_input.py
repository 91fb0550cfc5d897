"""Kineto bad input and folder policy: one clear line (ProfkitError), never a traceback.

Every trace here is synthetic, built in the test (``synthetic_trace``): the
point is the malformed or odd input itself.  Real captures are read in
test_kineto_reader.py.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from profkit.errors import ProfkitError
from profkit.readers import open_trace
from profkit.readers.kineto import parse


def synthetic_event(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    pid, tid = (0, 7) if cat in ("kernel", "gpu_memcpy", "gpu_memset") else (100, 100)
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def synthetic_trace(events: list[dict[str, Any]], **header: Any) -> dict[str, Any]:
    return {"schemaVersion": 1, "deviceProperties": [], **header, "traceEvents": events,
            "traceName": "synthetic"}


def kineto_layout(doc: dict[str, Any]) -> bytes:
    """JSON laid out as Kineto's C++ writer does: one event per block at indent 2."""
    events = doc["traceEvents"]
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    lines = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()] + ['  "traceEvents": [']
    body = ",\n".join("  {\n    " + json.dumps(e)[1:-1] + "\n  }" for e in events)
    return ("\n".join(lines) + "\n" + body + "\n  ]\n}\n").encode()


def write(path: Path, doc: dict[str, Any] | bytes, gz: bool = False) -> Path:
    data = doc if isinstance(doc, bytes) else kineto_layout(doc)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def one_line_error(path: Path) -> str:
    before = (path.read_bytes(), path.stat().st_mtime_ns) if path.is_file() else None
    with pytest.raises(ProfkitError) as info:
        open_trace(path)
    if before is not None:
        assert (path.read_bytes(), path.stat().st_mtime_ns) == before  # read-only
    line = info.value.one_line()
    assert "\n" not in line and line
    return line


SMALL = synthetic_trace([
    synthetic_event("cuda_runtime", "cudaLaunchKernel", 10.0, 5.0, correlation=1),
    synthetic_event("kernel", "k1", 20.0, 3.5, device=0, stream=7, correlation=1, grid=[1, 1, 1], block=[32, 1, 1]),
    synthetic_event("cpu_op", "aten::add", 9.0, 8.0, **{"External id": 3}),
])


def test_json_that_is_no_trace(tmp_path: Path) -> None:
    assert "not a PyTorch profiler trace" in one_line_error(write(tmp_path / "x.json", b'{"hello": [1, 2]}'))
    assert "no trace events" in one_line_error(write(tmp_path / "y.json", b"[1, 2, 3]"))
    assert "no trace events" in one_line_error(write(tmp_path / "z.json", synthetic_trace([])))


def test_truncated_json(tmp_path: Path) -> None:
    data = kineto_layout(SMALL)
    line = one_line_error(write(tmp_path / "t.json", data[: len(data) * 2 // 3]))
    assert "not valid JSON, or is truncated" in line


@pytest.mark.parametrize("damage", ["truncate", "corrupt"])
def test_damaged_gzip(tmp_path: Path, damage: str) -> None:
    packed = gzip.compress(kineto_layout(synthetic_trace(SMALL["traceEvents"] * 200)))
    if damage == "truncate":
        packed = packed[: len(packed) // 2]
    else:
        middle = len(packed) // 2
        packed = packed[:middle] + bytes(b ^ 0xFF for b in packed[middle:middle + 64]) + packed[middle + 64:]
    line = one_line_error(write(tmp_path / "t.json.gz", packed))
    assert "truncated" in line or "corrupt gzip" in line


def test_empty_file(tmp_path: Path) -> None:
    assert "empty" in one_line_error(write(tmp_path / "e.json", b""))


def test_no_gpu_events_opens_and_says_so(tmp_path: Path) -> None:
    trace = open_trace(write(tmp_path / "cpu.json", synthetic_trace([SMALL["traceEvents"][2]])))
    assert not trace.has("kernels") and not trace.has("api")
    assert trace.count("kernels") == 0 and trace.count("cpu_ops") == 1


def test_events_with_missing_fields_are_skipped_and_counted(tmp_path: Path) -> None:
    good = synthetic_event("kernel", "k", 1.0, 2.0, device=0, stream=7, correlation=5)
    no_dur = {k: v for k, v in good.items() if k != "dur"}
    no_name = {k: v for k, v in good.items() if k != "name"}
    no_args = {k: v for k, v in good.items() if k != "args"}
    bad_ts = {**synthetic_event("cuda_runtime", "cudaMemcpyAsync", 1.0, 1.0), "ts": "soon"}
    odd_args = {**synthetic_event("cpu_op", "aten::mm", 1.0, 1.0), "args": [1, 2]}
    trace = open_trace(write(tmp_path / "m.json", synthetic_trace([good, no_dur, no_name, no_args, bad_ts, odd_args])))
    assert trace.meta.extra["skipped_events"] == {"kernel": 2, "cuda_runtime": 1}
    kernels = trace.table("kernels", ["name", "device", "correlation", "grid_x"])
    assert kernels["device"].tolist() == [0, -1] and kernels["correlation"].tolist() == [5, -1]
    assert kernels["grid_x"].tolist() == [-1, -1]
    assert trace.count("api") == 0
    assert trace.table("cpu_ops", ["name", "external_id"]).to_dict("list") == {"name": ["aten::mm"],
                                                                               "external_id": [-1]}


def test_chunked_read_equals_whole_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scale input: many small blocks force many chunks; the one-piece decode must agree."""
    events = []
    for i in range(3000):
        events.append(synthetic_event("cuda_runtime", "cudaLaunchKernel", 10.0 * i, 2.0, correlation=i))
        events.append(synthetic_event("kernel", f"k{i % 7}", 10.0 * i + 3, 1.25 + i % 5, device=0, stream=7,
                                      correlation=i, grid=[i, 1, 1], block=[128, 1, 1],
                                      **{"registers per thread": 32, "shared memory": 1024}))
    path = write(tmp_path / "scale.json", synthetic_trace(events))
    monkeypatch.setattr(parse, "BLOCK", 4096)
    chunked = open_trace(path)
    monkeypatch.setattr(parse, "_separator", lambda events: None)
    whole = open_trace(path)
    for table in ("kernels", "api"):
        assert chunked.table(table).equals(whole.table(table))
    assert chunked.count("kernels") == 3000


# -- folders --------------------------------------------------------------------
def handler_name(worker: str, ns: int) -> str:
    return f"{worker}.{ns}.pt.trace.json"


def test_folder_without_traces(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text('{"command": ["python", "x.py"]}')
    assert "no PyTorch profiler trace" in one_line_error(tmp_path)


def test_folder_of_several_ranks_is_an_error_pointing_at_ranks(tmp_path: Path) -> None:
    for rank in (0, 1):
        write(tmp_path / handler_name(f"host_{100 + rank}", 1700000000000000000 + rank),
              synthetic_trace(SMALL["traceEvents"], distributedInfo={"backend": "nccl", "rank": rank,
                                                                    "world_size": 2}))
    line = one_line_error(tmp_path)
    assert "2 ranks or processes" in line and "profkit ranks" in line and "rank 0" in line


def test_folder_of_several_processes_without_ranks_is_an_error(tmp_path: Path) -> None:
    for worker in ("host_1", "host_2"):
        write(tmp_path / handler_name(worker, 1700000000000000000), SMALL)
    assert "profkit ranks" in one_line_error(tmp_path)


def test_folder_of_cycles_reads_the_newest(tmp_path: Path) -> None:
    older = write(tmp_path / handler_name("host_7", 1700000000000000000), SMALL)
    newer_events = SMALL["traceEvents"] + [synthetic_event("cpu_op", "aten::mul", 30.0, 1.0)]
    newer = write(tmp_path / (handler_name("host_7", 1700000000500000000) + ".gz"),
                  synthetic_trace(newer_events), gz=True)
    (tmp_path / "run.json").write_text("{}")
    trace = open_trace(tmp_path)
    assert trace.path == newer and trace.count("cpu_ops") == 2
    assert older.name not in trace.meta.extra["folder_note"] and "2 profiler cycles" in trace.meta.extra["folder_note"]


def test_folder_of_one_trace(tmp_path: Path) -> None:
    only = write(tmp_path / "anything.json", SMALL)
    trace = open_trace(tmp_path)
    assert trace.path == only and "folder_note" not in trace.meta.extra


# -- through the CLI: exit 2, one line on stderr -----------------------------------
@pytest.mark.parametrize("case", ["no_trace", "truncated", "gzip", "no_gpu"])
@pytest.mark.parametrize("command", ["kernels", "api", "nvtx"])
def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path, case: str, command: str) -> None:
    from click.testing import CliRunner

    from profkit.cli import cli

    data = kineto_layout(SMALL)
    path = {
        "no_trace": lambda: write(tmp_path / "x.json", b'{"hello": 1}'),
        "truncated": lambda: write(tmp_path / "t.json", data[: len(data) // 2]),
        "gzip": lambda: write(tmp_path / "t.json.gz", gzip.compress(data)[:40]),
        "no_gpu": lambda: write(tmp_path / "cpu.json", synthetic_trace([SMALL["traceEvents"][2]])),
    }[case]()
    result = CliRunner().invoke(cli, [command, str(path)])
    if case == "no_gpu" and command == "kernels":  # a CPU-only trace (issue 32): an empty table, and why
        assert result.exit_code == 0 and "CPU-only capture" in result.output, result.output
        return
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    if case == "no_gpu":
        assert "has no" in lines[0]


def test_cuda_sync_events_read(tmp_path: Path) -> None:
    # Synthetic, in the form recent PyTorch writes them (and HTA's critical-path
    # test traces hold): cat "cuda_sync", the kind in the name and in args.
    events = SMALL["traceEvents"] + [
        synthetic_event("cuda_sync", "Stream Sync", 30.0, 2.0, correlation=9, stream=7, device=0,
                        cuda_sync_kind="Stream Sync"),
        synthetic_event("cuda_sync", "Event Sync", 33.0, 1.0, correlation=10, stream=-1, device=0,
                        cuda_sync_kind="Event Sync"),
    ]
    trace = open_trace(write(tmp_path / "t.json", synthetic_trace(events)))
    syncs = trace.table("syncs", ["start", "end", "stream", "sync_type"])
    assert list(syncs["stream"]) == [7, -1] and len(set(syncs["sync_type"].astype(str))) == 2
    assert list(syncs["end"] - syncs["start"]) == [2000, 1000]


def test_folder_of_two_traces_of_one_rank_says_which_it_reads(tmp_path: Path) -> None:
    """Two runs' traces of rank 0 side by side (HTA's trace_compare holds such a pair): the newest is
    read, and a warning names it and the one left out, where it was read silently."""
    import os
    import shutil

    from click.testing import CliRunner

    from profkit.cli import cli

    source = Path(__file__).parent / "data" / "hta_zoo" / "sampled_rank-0.json.gz"
    base, test = tmp_path / "base.json.gz", tmp_path / "test.json.gz"
    shutil.copy(source, base)
    shutil.copy(source, test)
    os.utime(base, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    result = CliRunner().invoke(cli, ["kernels", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "holds 2 traces of rank 0: reading the newest, test.json.gz (not base.json.gz" in result.output


def test_another_accelerators_trace_is_no_cpu_only_capture() -> None:
    """An MTIA inference trace (HTA's test data) records its device work as mtia_ccp_events: profkit
    reads none of it, and says so, where it used to call the trace a CPU-only capture."""
    import gzip as gz
    from collections import Counter

    from click.testing import CliRunner

    from profkit.cli import cli

    path = Path(__file__).parent / "data" / "hta_other" / "mtia_inference_rank_0.json.gz"
    with gz.open(path) as handle:
        categories = Counter(e.get("cat") for e in json.load(handle)["traceEvents"])
    device = categories["mtia_ccp_events"]
    assert device > 0 and categories["kernel"] == 0
    runner = CliRunner()
    kernels = runner.invoke(cli, ["kernels", str(path)])
    assert kernels.exit_code == 2 and f"{device:,} mtia_ccp_events events" in kernels.output
    steps = runner.invoke(cli, ["steps", str(path)])
    assert "CPU-only" not in steps.output
    assert "device work is another accelerator's work (mtia_ccp_events, mtia_runtime)" in " ".join(steps.output.split())


def test_kernels_under_the_range_profiler_are_named_not_timed() -> None:
    """HTA's cupti_profiler trace: torch.profiler with CUPTI's range profiler records each kernel
    as a ``cuda_profiler_range`` event (its counters, and the profiler's replay as its duration)
    and no ``kernel`` event.  profkit used to say "no kernel launches" beside 77 cudaLaunchKernel
    calls; it now names what the trace holds and times none of it."""
    import gzip as gz
    from collections import Counter

    from click.testing import CliRunner

    from profkit.cli import cli

    path = Path(__file__).parent / "data" / "hta_other" / "cupti_range_profiler.json.gz"
    with gz.open(path) as handle:
        events = json.load(handle)["traceEvents"]
    categories = Counter(e.get("cat") for e in events)
    ranges = categories["cuda_profiler_range"]
    launches = sum(e.get("cat") == "cuda_runtime" and e["name"] == "cudaLaunchKernel" for e in events)
    assert ranges == launches > 0 and categories["kernel"] == 0
    runner = CliRunner()
    kernels = runner.invoke(cli, ["kernels", str(path)])
    assert kernels.exit_code == 2 and f"{ranges} cuda_profiler_range events" in kernels.output
    assert "CUPTI's range profiler" in kernels.output and "Traceback" not in kernels.output
    steps = runner.invoke(cli, ["steps", str(path)])
    assert steps.exit_code == 0 and "CPU-only" not in steps.output and "range profiler" in steps.output
    breakdown = runner.invoke(cli, ["breakdown", str(path)])
    assert breakdown.exit_code == 0 and "no kernel launches" not in breakdown.output
    assert "no kernel that profkit reads: the trace records kernels measured by CUPTI's range profiler" in \
        " ".join(breakdown.output.split())

