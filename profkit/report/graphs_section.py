"""The report's CUDA graphs section and its finding, from ``profkit.analysis.kernels.graphs``."""

from __future__ import annotations

from typing import Any

from profkit.analysis.kernels.graphs import GRAPH_LEVEL, cuda_graphs
from profkit.model import Trace
from profkit.output import Column
from profkit.report.model import Section, Table
from profkit.report.text import duration

GRAPH_COLUMNS = [
    Column("graph", "Graph", "kernel"),
    Column("replays", "Replays", "int"),
    Column("replays_per_step", "Replays per step", "float", missing="—"),
    Column("gpu_ns", "GPU time (ns)", "ns"),
    Column("mean_replay_ns", "Mean replay (ns)", "ns"),
    Column("kernels_per_replay", "Kernels per replay", "float", missing="—"),
]


def fill_graphs(section: Section, trace: Trace, found: dict[str, Any]) -> None:
    """Graphs, replays per step, GPU time inside them, their launch and set-up cost."""
    graphs = cuda_graphs(trace, found.get("steps"))
    found["graphs"] = graphs
    if graphs is None:  # no section (build.py leaves it out)
        return
    section.data = graphs
    section.intro = (
        "CUDA graphs replayed in the trace: each replay runs a captured sequence of kernels from one "
        "cudaGraphLaunch. GPU time counts the replays' GPU work; per step is over the steady-state steps.")
    if graphs["level"] == GRAPH_LEVEL:
        section.notes.append(graphs["note"][0].upper() + graphs["note"][1:] + ".")
    per_step = graphs["per_step"] or {}
    launch, setup = graphs["launch"], graphs["setup"]
    facts = [
        ("Recorded", "one row per replay (graph level)" if graphs["level"] == GRAPH_LEVEL
         else "every kernel of every replay (node level)"),
        ("Graphs, replays", f"{len(graphs['graphs'])} graphs, {graphs['replays']:,} replays"),
        ("GPU time inside graphs", f"{duration(graphs['in_graphs_ns'])} of {duration(graphs['gpu_ns'])} "
                                   f"({graphs['in_graphs_pct']:.1f}%)"),
    ]
    if per_step:
        facts.append(("Per steady-state step", f"{per_step['replays_per_step']:g} replays, "
                                               f"{duration(per_step['in_graphs_ns_per_step'])} of GPU work inside "
                                               f"graphs, {duration(per_step['outside_graphs_ns_per_step'])} "
                                               "outside"))
    if launch["calls"]:
        facts.append(("cudaGraphLaunch (CPU)", f"{launch['calls']:,} calls, {duration(launch['mean_ns'])} each"))
    if launch["replaced_launches_host_ns"] is not None:
        facts.append(("Launches the replays replaced",
                      f"{graphs['kernels_in_replays']:,} kernels x {duration(launch['kernel_launch_median_ns'])} "
                      f"(median kernel launch here) = {duration(launch['replaced_launches_host_ns'])} of CPU time, "
                      f"against {duration(launch['host_ns'])} in cudaGraphLaunch"))
    if setup["calls"]:
        facts.append(("Capture and instantiation (CPU)",
                      f"{setup['calls']:,} calls, {duration(setup['host_ns'])}: "
                      f"{duration(setup['before_steady_ns'])} before the steady state, "
                      f"{duration(setup['in_steady_ns'])} inside it"))
    section.facts = facts
    section.tables.append(Table("graphs", "Graphs", GRAPH_COLUMNS, graphs["graphs"], label_key="graph"))


def graphs_finding(found: dict[str, Any]) -> list[str]:
    """One finding naming the graphs, and how much of the GPU's work they hold."""
    graphs = found.get("graphs")
    if not graphs or not graphs["graphs"]:
        return []
    per_step = graphs["per_step"]
    names = ", ".join(g["graph"] if len(g["graph"]) <= 60 else g["graph"][:59] + "…" for g in graphs["graphs"][:3])
    count = len(graphs["graphs"])
    whole = f"{graphs['in_graphs_pct']:.0f}% of the whole capture's GPU work"
    share = (f"{per_step['in_graphs_pct']:.0f}% of the steady state's GPU work ({whole}, start-up included)"
             if per_step and per_step.get("in_graphs_pct") is not None else whole)
    text = (f"CUDA graphs hold {share}: {count} "
            f"{'graph' if count == 1 else 'graphs'} ({names}) replayed {graphs['replays']:,} times")
    captures, instantiations = graphs.get("captures") or 0, graphs.get("instantiations") or 0
    if captures or instantiations:
        text += (f" from {captures:,} {'capture' if captures == 1 else 'captures'} and {instantiations:,} "
                 f"{'instantiation' if instantiations == 1 else 'instantiations'}")
        if max(captures, instantiations) > count:
            text += " (more than the graphs replayed: a graph was captured again, or captured and never replayed)"
        if graphs.get("captures_in_steady"):
            text += f", {graphs['captures_in_steady']:,} of the captures inside the steady state"
    if per_step:
        text += (f", {per_step['replays_per_step']:g} per step ({duration(per_step['in_graphs_ns_per_step'])} "
                 f"of GPU work per step inside them)")
    launch = graphs["launch"]
    if launch["calls"] and launch["replaced_launches_host_ns"]:
        text += (f"; their {launch['calls']:,} launches cost the CPU {duration(launch['host_ns'])} instead of "
                 f"~{duration(launch['replaced_launches_host_ns'])} for their "
                 f"{graphs['kernels_in_replays']:,} kernels launched one by one")
    text += "."
    if graphs["level"] == GRAPH_LEVEL:
        text += " The kernels inside them were not recorded one by one: capture with --cuda-graph-trace=node."
    return [text]
