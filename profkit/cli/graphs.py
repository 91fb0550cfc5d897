"""`profkit graphs TRACE`: the CUDA graphs a trace replayed (profkit.analysis.kernels.graphs).

Thin command: open the trace, take ``cuda_graphs`` through ``profkit.api.graphs_json`` (as the
Python API does), render with profkit.output.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from profkit.api import graphs_json
from profkit.output import json_text
from profkit.output import emit_rows, format_option, wide_option
from profkit.readers import open_trace
from profkit.report.graphs_section import GRAPH_COLUMNS, graphs_finding
from profkit.terminal import echo_for


@click.command()
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@wide_option()
@format_option()
def graphs(trace_path: Path, wide: bool, fmt: str) -> None:
    """CUDA graphs: each graph's replays (per steady-state step), GPU time inside graphs vs
    outside, cudaGraphLaunch's CPU time against the launches it replaced, capture and
    instantiation cost.

    \b
    Examples:
      profkit graphs run.sqlite                 # nsys, graph or node level
      profkit graphs trace.json.gz --format json

    JSON: level ("graph": one row per replay, its kernels not recorded; "node": every
    kernel of every replay), graphs (graph, replays, replays_per_step, gpu_ns,
    mean_replay_ns, kernels_per_replay), replays, gpu_ns, in_graphs_ns,
    outside_graphs_ns, in_graphs_pct, kernels_in_replays, per_step, launch, setup, note;
    null when the trace replayed no graph.  Definitions: profkit.analysis.kernels.graphs.
    """
    with open_trace(trace_path) as trace:
        result = graphs_json(trace)
    if fmt == "json":
        click.echo(json_text(result, indent=2))
        return
    if result is None:
        click.echo(f"{trace_path.name}: no CUDA graph was replayed")
        return
    if fmt != "csv":
        say = echo_for(fmt)
        for line in graphs_finding({"graphs": result}):
            say(line)
    emit_rows(result["graphs"], GRAPH_COLUMNS, fmt, title="CUDA graphs", wide=wide)
