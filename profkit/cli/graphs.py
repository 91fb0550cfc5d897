"""`profkit graphs TRACE`: the CUDA graphs a trace replayed (profkit.analysis.kernels.graphs).

Thin command: take each rank's ``cuda_graphs`` through ``profkit.api.graphs_json`` (as the
Python API does), render with profkit.output.
"""

from __future__ import annotations

from pathlib import Path

import click

from profkit.api import graphs_json, per_rank
from profkit.cli.per_rank import heading, rank_columns, rank_option, with_rank
from profkit.output import json_text
from profkit.output import emit_rows, format_option, wide_option
from profkit.report.graphs_section import GRAPH_COLUMNS, graphs_finding
from profkit.terminal import echo_for


@click.command()
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@rank_option
@wide_option()
@format_option()
def graphs(trace_path: Path, rank: int | None, wide: bool, fmt: str) -> None:
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
    null when the trace replayed no graph.  A multi-rank input: a list, one object per rank
    (rank, rank_source and the keys above; only the rank keys for a rank that replayed no graph).
    Definitions: profkit.analysis.kernels.graphs.
    """
    answers = per_rank(trace_path, rank, graphs_json)
    if fmt == "json":
        click.echo(json_text(answers.json(), indent=2))
        return
    if fmt == "csv" and any(a.value is not None for a in answers.items):
        emit_rows(with_rank(answers, lambda found: found["graphs"] if found else []),
                  rank_columns(answers, GRAPH_COLUMNS), fmt)
        return
    say = echo_for(fmt)
    for answer in answers.items:
        label = heading(answers, answer)
        result = answer.value
        if result is None:
            click.echo(f"{trace_path.name}{', ' + label if label else ''}: no CUDA graph was replayed")
            continue
        if fmt != "csv":
            if label:
                say(f"{trace_path.name}, {label}:")
            for line in graphs_finding({"graphs": result}):
                say(line)
        emit_rows(result["graphs"], GRAPH_COLUMNS, fmt, title="CUDA graphs", wide=wide)
