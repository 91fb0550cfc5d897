"""Issue #30's wrong readings of stalls, graphs and findings, each on a real committed capture.

The expected values come from the exports' own rows (plain SQL on the nsys
SQLite, the trace model's reader tables for Kineto), never from the analysis
under test:

- a program's last ``torch.cuda.synchronize()``, after its loop, is no per-step
  cost (``nsys2025_mlp_gpu_plain``, ``nsys2025_mlp_plain``: sample_kernels/train_mlp.py
  ends its loop with one);
- no share over 100% of the steps (``nsys2023_vector_add``, ``nsys2025_bad``);
- a ``cudaStreamWaitEvent`` (the CPU does not wait) causes no idle (``gpt_graphs_graph``,
  ``probe_graph``: cuBLAS loads its modules meanwhile);
- idle stops where the thread loads modules (``nsys2023_sync_sites``: the first
  ``y.max() > 0`` was charged 35 ms of cuLibraryLoadData) or compiles
  (``kineto/gpt_compiled_cold``: a 7 us ``.item()`` was charged 6.76 s of Inductor).
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from profkit.analysis.sync import stalls
from profkit.analysis.sync.stalls import analyze_stalls
from profkit.readers import open_trace
from tests.conftest import nsys_fixture

DATA = Path(__file__).parent / "data"
GLOBAL_TID_BITS = (1 << 48) - 1  # nsys globalTid: bits 0-47 hold the process and thread


def nsys_report(name: str, folder: Path | None = None, **kwargs) -> tuple[Path, stalls.StallReport]:
    path = nsys_fixture(name) if folder is None else _unpacked(folder / f"{name}.sqlite.xz")
    with open_trace(path) as trace:
        return path, analyze_stalls(trace, **kwargs)


def _unpacked(packed: Path) -> Path:
    from tests.conftest import _decompressed

    return _decompressed(packed)


def sql(path: Path, query: str, *args) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
        return db.execute(query, args).fetchall()


def api_rows(path: Path, like: str) -> list[tuple[int, int, int]]:
    """(thread as profkit packs it, start, end) of the runtime calls whose name is LIKE ``like``."""
    rows = sql(path, "SELECT r.globalTid, r.start, r.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                     "ON s.id = r.nameId WHERE s.value LIKE ?", like)
    return [(tid & GLOBAL_TID_BITS, a, b) for tid, a, b in rows]


def last_gpu_end(path: Path) -> int:
    return sql(path, "SELECT max(end) FROM (SELECT end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
                     "SELECT end FROM CUPTI_ACTIVITY_KIND_MEMCPY)")[0][0]


# -- 1. per-step costs only inside the steady steps ------------------------------------------------
@pytest.mark.parametrize("name", ["nsys2025_mlp_gpu_plain", "nsys2025_mlp_plain"])
def test_the_sync_after_the_loop_costs_no_time_per_step(name: str) -> None:
    """train_mlp.py ends with torch.cuda.synchronize() after its loop: the export's last
    cudaDeviceSynchronize.  Its idle lies after the last step's GPU work, so it is a one-time
    cost; the old code charged it per step (0.014 ms on mlp_gpu_plain, the Steps table said 0;
    on mlp_plain the last step held its 144 us)."""
    path, report = nsys_report(name)
    (last_sync,) = sql(path, "SELECT max(r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                             "ON s.id = r.nameId WHERE s.value LIKE 'cudaDeviceSynchronize%'")[0]
    final = next(e for e in report.events if e.start == last_sync)
    assert final.gpu_idle_ns > 0 and final.steady_idle_ns == 0
    last_step = max(report.steps, key=lambda s: s.index)
    assert final.idle_start >= last_step.gpu_window[1]
    site = next(s for s in report.sites if s["api"] == "cudaDeviceSynchronize")
    assert site["per_step"]["gpu_idle_ns"] == 0
    assert site["one_time_gpu_idle_ns"] == site["gpu_idle_ns"] > 0
    assert all(s.gpu_idle_ns == 0 for s in report.steps)
    with_any_cost = stalls.write_findings(report.sites, report.step_stats, report.step_range, report.run_ns, 1e-6)
    assert not any("per step" in f and f.startswith("cudaDeviceSynchronize") for f in with_any_cost)
    (once,) = [f for f in with_any_cost if f.startswith("cudaDeviceSynchronize")]
    assert "outside the steady-state" in once and "one-time" in once and f"{site['gpu_idle_ns'] / 1e6:.3g} ms" in once


@pytest.mark.parametrize("name", ["nsys2025_mlp_gpu_plain", "nsys2025_sync", "nsys2023_sync_sites",
                                  "nsys2025_train_print"])
def test_sites_per_step_idle_adds_up_to_the_steps_table(name: str) -> None:
    """The sites' idle per step is the idle inside the steady steps: together, the Steps table's
    sync idle per step (the old code counted a sync's whole idle, also the part after its step)."""
    _, report = nsys_report(name)
    per_site = sum(s["per_step"]["gpu_idle_ns"] for s in report.sites if s["per_step"])
    assert per_site == pytest.approx(report.step_stats["sync_gpu_idle_mean_ns"], abs=1.0)
    for site in report.sites:
        assert site["steady_gpu_idle_ns"] + site["one_time_gpu_idle_ns"] == site["gpu_idle_ns"]


def test_llama_generate_site_idle_per_step_is_the_steps_idle() -> None:
    """HF generate: a .item()-like copy per decode step.  The old code said 0.454 ms per step for the
    site and 0.284 ms in the Steps table; both now count the idle inside the steps' GPU windows."""
    _, report = nsys_report("llama_generate_nsys", DATA / "host" / "nsys")
    # one sync a step; the one whose call a Python sample fell inside is its own row, at its line
    # (hf_llama.py:202 was the .tolist() when this was captured), the others "source unknown"
    sites = [s for s in report.sites if s["nvtx"] == "decode_step"]
    assert {Path(s["source"]).name for s in sites if s["source"]} <= {"hf_llama.py:202"}
    assert sum(s["per_step"]["gpu_idle_ns"] for s in sites) == pytest.approx(
        report.step_stats["sync_gpu_idle_mean_ns"], abs=1.0)


@pytest.mark.parametrize("name", ["nsys2023_vector_add", "nsys2025_bad"])
def test_no_share_of_the_step_over_100_percent(name: str) -> None:
    """Old: "costing 211.8 ms per step (273% of the median step time)" (vector_add), 328% (bad).
    A step holds only the idle inside its own GPU window, so the share of the steady-state step time
    is at most 100%, and each finding says what its share is of."""
    _, report = nsys_report(name)
    assert report.findings
    for step in report.steps:
        assert step.gpu_idle_ns <= step.duration_ns
    for finding in report.findings:
        for pct in re.findall(r"(\d+)% of the (\w[\w: ']*)", finding):
            assert int(pct[0]) <= 100, finding
            assert pct[1].startswith(("steady", "run")), finding


# -- 2. only calls that block the CPU are charged ----------------------------------------------------
@pytest.mark.parametrize("folder, name", [("graphs", "gpt_graphs_graph"), ("graphs", "probe_graph"),
                                          ("ddp/nsys", "rank0")])
def test_stream_wait_event_causes_no_idle(folder: str, name: str) -> None:
    """cudaStreamWaitEvent makes a stream wait, not the CPU: its calls return in microseconds (SQL),
    and it is charged no idle (old: 25 ms on gpt_graphs_graph, 13.6 ms on probe_graph, 70 ms on rank0)."""
    path, report = nsys_report(name, DATA / folder)
    waits = api_rows(path, "cudaStreamWaitEvent%")
    assert waits and max(b - a for _, a, b in waits) < 1_000_000
    events = [e for e in report.events if e.api == "cudaStreamWaitEvent"]
    assert len(events) == len(waits)
    assert all(e.gpu_idle_ns == 0 and e.cpu_blocked_ns == 0 for e in events)
    assert all(s["gpu_idle_ns"] == 0 for s in report.sites if s["api"] == "cudaStreamWaitEvent")


# -- 3. idle stops where the thread loads modules or compiles -----------------------------------------
@pytest.mark.parametrize("folder, name", [("nsys", "nsys2023_sync_sites"), ("nsys", "nsys2025_sync"),
                                          ("graphs", "gpt_graphs_graph")])
def test_idle_stops_where_the_thread_loads_modules(folder: str, name: str) -> None:
    """No event's idle overlaps a cuLibraryLoadData / cuModuleLoad* call of its thread (SQL).  The
    first `if y.max() > 0` of sync_elementwise.py was charged 35 ms of cuBLAS module loading."""
    path, report = nsys_report(name, DATA / folder)
    loads = api_rows(path, "cuLibraryLoad%") + api_rows(path, "cuModuleLoad%")
    assert loads
    charged_with_loading = [e for e in report.events if e.gpu_idle_ns > 0 and any(
        tid == e.global_tid and a < e.idle_end and b > e.idle_start for tid, a, b in loads)]
    assert charged_with_loading == []
    assert report.host_work["module_load_ns"] > 0


def test_truthiness_line_is_not_charged_the_module_loading() -> None:
    _, report = nsys_report("nsys2023_sync_sites")
    (site,) = [s for s in report.sites if s["kind"] == "truthiness"]
    assert site["gpu_idle_ns"] < 10_000_000  # was 35.1 ms: the first call's 31 ms of cuLibraryLoadData


def test_compile_time_is_no_sync_idle() -> None:
    """gpt_compiled_cold: the first compiled run, the compile in the trace (torch.profiler's
    '... (dynamo_timed)' ops, 11.5 s of inductor_compile).  No sync's idle overlaps a compile op
    of its thread; the .item() before the compile was charged 6.76 s."""
    with open_trace(DATA / "kineto" / "gpt_compiled_cold.json.gz") as trace:
        report = analyze_stalls(trace)
        names = trace.codes("cpu_ops", "name")
        compile_codes = [i for i, n in enumerate(names.categories) if n.endswith("(dynamo_timed)")]
        rows = np.flatnonzero(np.isin(names.codes, compile_codes))
        pid, tid = trace.array("cpu_ops", "pid")[rows], trace.array("cpu_ops", "tid")[rows]
        start, end = trace.array("cpu_ops", "start")[rows], trace.array("cpu_ops", "end")[rows]
    compiles = [((int(p) << 24) | int(t), int(a), int(b)) for p, t, a, b in zip(pid, tid, start, end)]
    assert sum(b - a for _, a, b in compiles) > 1e9
    for e in report.events:
        if e.gpu_idle_ns > 0:
            assert not any(t == e.global_tid and a < e.idle_end and b > e.idle_start for t, a, b in compiles)
    assert max(e.gpu_idle_ns for e in report.events) < 100_000_000  # was 6,759 ms
    assert report.host_work["compile_ns"] > 10e9  # told apart, once
    assert any(f.startswith("torch.compile compiled for") and "one-time" in f for f in report.findings)


# -- 7. the sync hook's range texts read decoded everywhere --------------------------------------------
RAW_SITE = "profkit.sync|"


def cli_output(*args: str) -> str:
    from click.testing import CliRunner

    from profkit.cli import cli

    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_sync_site_ranges_are_decoded_in_breakdown_and_steps() -> None:
    """nsys2025_sync holds one sync-hook range per sync (their text in the export is raw, SQL);
    the idle stretches of `breakdown` and the steps' evidence named them raw."""
    path = nsys_fixture("nsys2025_sync")
    (raw,) = sql(path, "SELECT count(*) FROM StringIds WHERE value LIKE 'profkit.sync|%'")[0]
    assert raw >= 6
    for args in (("breakdown", str(path)), ("breakdown", str(path), "--format", "json"),
                 ("steps", str(path), "--format", "json"), ("stalls", str(path), "--format", "json")):
        out = cli_output(*args)
        assert RAW_SITE not in out, args
    assert "sync: truthiness at sync_elementwise.py:26" in cli_output("breakdown", str(path))


def test_sync_site_ranges_are_decoded_in_the_report(tmp_path: Path) -> None:
    """The report's NVTX table, idle stretches, findings and timeline data."""
    path = nsys_fixture("nsys2025_sync")
    cli_output("report", str(path), "-o", str(tmp_path / "r"))
    for name in ("report.md", "report.json", "report.html"):
        assert RAW_SITE not in (tmp_path / "r" / name).read_text(), name
    assert "sync: .item() at sync_elementwise.py:25" in (tmp_path / "r" / "report.md").read_text()


# -- 4. advice never recommends what the trace shows is done ---------------------------------------------
def report_findings(path: Path, out: Path) -> list[str]:
    import json

    cli_output("report", str(path), "-o", str(out))
    return json.loads((out / "report.json").read_text())["findings"]


def test_launch_profile_counts_graph_kernels_apart() -> None:
    """At node level every kernel of a replay has graphNodeId set (SQL): those are no launches of
    their own; the rest are launched one by one."""
    from profkit.analysis.kernels.launches import launch_profile

    path = _unpacked(DATA / "graphs" / "gpt_graphs_node.sqlite.xz")
    ((total, in_graphs, short_alone),) = sql(
        path, "SELECT count(*), sum(graphNodeId IS NOT NULL), sum(graphNodeId IS NULL AND end - start < 10000) "
              "FROM CUPTI_ACTIVITY_KIND_KERNEL")
    with open_trace(path) as trace:
        profile = launch_profile(trace)
    assert (profile["kernels"], profile["in_graphs"], profile["one_by_one"], profile["short_one_by_one"]) == (
        total, in_graphs, total - in_graphs, short_alone)
    assert profile["compiled"]  # Inductor's triton_ kernels


@pytest.mark.parametrize("name", ["gpt_graphs_node", "gpt_graphs_graph"])
def test_no_cuda_graph_or_compile_advice_where_both_are_used(name: str, tmp_path: Path) -> None:
    """torch.compile(mode="reduce-overhead"): 5,945 of 6,652 kernels run inside CUDA graphs and
    Inductor made them; the old report said "Fusing them (torch.compile) or replaying them as a
    CUDA graph removes most of it" over all 6,104 launches, graph kernels included."""
    findings = report_findings(_unpacked(DATA / "graphs" / f"{name}.sqlite.xz"), tmp_path / "r")
    assert not any("as a CUDA graph" in f or "(torch.compile)" in f for f in findings)


def test_compiled_program_is_not_told_to_compile(tmp_path: Path) -> None:
    """nsys2025_gpt_compiled runs Inductor's kernels one by one: the advice may name CUDA graphs,
    never torch.compile."""
    findings = report_findings(nsys_fixture("nsys2025_gpt_compiled"), tmp_path / "r")
    launch = [f for f in findings if "launched one by one" in f]
    assert launch and "CUDA graph" in launch[0] and "torch.compile" not in launch[0]


# -- 5. graphs: captures and instantiations ---------------------------------------------------------
def test_graph_captures_and_instantiations_are_counted(tmp_path: Path) -> None:
    """gpt_graphs: torch.compile's cudagraph trees capture 3 graphs (3 cudaStreamBeginCapture, 3
    cudaGraphInstantiateWithFlags: SQL) and replay 2 of them; "2 graphs ... replayed 58 times"
    left the third capture out."""
    from profkit.analysis.kernels.graphs import cuda_graphs

    path = _unpacked(DATA / "graphs" / "gpt_graphs_node.sqlite.xz")
    (captures,) = sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                            "WHERE s.value LIKE 'cudaStreamBeginCapture%'")[0]
    (instantiations,) = sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                                  "ON s.id = r.nameId WHERE s.value LIKE 'cudaGraphInstantiate%'")[0]
    with open_trace(path) as trace:
        graphs = cuda_graphs(trace)
    assert (graphs["captures"], graphs["instantiations"]) == (captures, instantiations) == (3, 3)
    assert len(graphs["graphs"]) == 2 and graphs["captures_in_steady"] == 0
    finding = next(f for f in report_findings(path, tmp_path / "r") if f.startswith("CUDA graphs hold"))
    assert "from 3 captures and 3 instantiations" in finding


# -- 6. copies as a share of all GPU work -----------------------------------------------------------
def test_copy_share_counts_graph_replays(tmp_path: Path) -> None:
    """gpt_graphs_graph (graph level): the old finding said copies took "29% of the kernel time",
    leaving out 307 ms of graph replays; of all GPU work (SQL) they are about 2%."""
    path = _unpacked(DATA / "graphs" / "gpt_graphs_graph.sqlite.xz")
    ((copy_ns,),) = sql(path, "SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    ((kernel_ns,),) = sql(path, "SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    ((graph_ns,),) = sql(path, "SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
    assert graph_ns > 10 * kernel_ns and copy_ns / (copy_ns + kernel_ns + graph_ns) < 0.05
    findings = report_findings(path, tmp_path / "r")
    assert not any("of the kernel time" in f for f in findings)
    assert not any(f.startswith("Memory copies") for f in findings)  # 2% of the work: no finding


def test_copy_share_is_of_all_gpu_work() -> None:
    from profkit.report.findings import findings

    memory = [{"total_ns": 89, "direction": "Host-to-Device", "instances": 1, "total_bytes": 8}]
    kernels = [{"total_ns": 49, "instances": 1, "avg_ns": 49, "name": "k"}]
    assert not any("Memory" in f for f in findings(memory=memory, kernels=kernels, graph_replay_ns=972))
    (copies,) = [f for f in findings(memory=memory, kernels=kernels) if f.startswith("Memory")]
    assert "64% of all GPU work" in copies  # 89 / (89 + 49)


def test_node_level_graphs_are_told_apart_by_their_node_ids() -> None:
    """A graph is the replays of the same captured nodes: the distinct smallest graphNodeId of each
    replay (SQL), so a graph captured again counts as another graph, whatever kernels it runs."""
    from profkit.analysis.kernels.graphs import cuda_graphs

    path = _unpacked(DATA / "graphs" / "gpt_graphs_node.sqlite.xz")
    captured = sql(path, "SELECT m, count(*) FROM (SELECT min(graphNodeId) AS m FROM CUPTI_ACTIVITY_KIND_KERNEL "
                         "WHERE graphNodeId IS NOT NULL GROUP BY correlationId) GROUP BY m")
    with open_trace(path) as trace:
        graphs = cuda_graphs(trace)
        assert int((trace.array("kernels", "graph_node_id") >= 0).sum()) == sum(
            n for (n,) in sql(path, "SELECT count(graphNodeId) FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    assert sorted(g["replays"] for g in graphs["graphs"]) == sorted(n for _, n in captured)
