"""The Steps section's figures: step times with their breakdown, and a few steady-state steps.

Both take plain data from ``profkit.report.steps_section`` (which gets it
from ``profkit.analysis.steps``) and return PNG bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib import cbook
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from profkit.report.figures import KIND_COLORS

PART_COLORS = {"compute_ns": "#1f6fb4", "communication_ns": "#f28e2b", "memory_ns": "#d1495b",
               "other_ns": "#8c8c8c", "idle_ns": "#e6e6e6"}
PART_LABELS = {"compute_ns": "compute", "communication_ns": "communication", "memory_ns": "memory",
               "other_ns": "other GPU work", "idle_ns": "idle"}
_RC = {"text.parse_math": False, "text.usetex": False, "font.size": 9}
WIDTH_IN, DPI = 12.0, 100


MAX_BARS = 400  # beyond this many steps a bar per step costs seconds and shows nothing more


def step_times_png(parts: pd.DataFrame, median_ns: float | None) -> bytes:
    """Stacked bars per step (compute, communication, memory, other, idle); warm-up hatched."""
    import matplotlib

    from profkit.report.figures import png_bytes, time_unit

    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(WIDTH_IN, 3.4), dpi=DPI)
        ax = fig.add_subplot(1, 1, 1)
        steady = parts[parts["phase"] == "steady"]["duration_ns"]
        scale_ref = float(steady.max()) if len(steady) else float(parts["duration_ns"].max() or 1)
        divisor, unit = time_unit(scale_ref)
        x = parts["index"].to_numpy()
        warm = (parts["phase"] == "warmup").to_numpy()
        bottom = np.zeros(len(parts))
        many = len(parts) > MAX_BARS  # thousands of steps: one filled area per part, not a patch per bar
        edges = [bottom]
        for part, color in PART_COLORS.items():
            height = parts[part].to_numpy(np.float64) / divisor
            if not many and warm.any():  # the few warm-up bars as patches, hatched
                ax.bar(x[warm], height[warm], bottom=bottom[warm], color=color, width=0.85, linewidth=0,
                       hatch="///", alpha=0.5)
            bottom = bottom + height
            edges.append(bottom)
        if not many:
            _add_bars(ax, x[~warm], [e[~warm] for e in edges], list(PART_COLORS.values()))
        else:
            ax.add_collection(_stacked_steps(x, edges, list(PART_COLORS.values())), autolim=False)
            # the limits fill_between would set: every edge at every step
            ax.update_datalim([(x.min(), min(e.min() for e in edges)), (x.max(), max(e.max() for e in edges))])
            ax.autoscale_view()
        if median_ns:
            ax.axhline(median_ns / divisor, color="black", linewidth=0.8, linestyle="--")
        # a warm-up step can take 100x a steady one: keep the steady steps readable
        top = 1.25 * scale_ref / divisor
        if bottom.max() > top:
            ax.set_ylim(0, top)
            for xi, total in list(zip(x, bottom))[:MAX_BARS]:
                if total > top:
                    ax.text(xi, top * 0.97, f"{total:.3g}", ha="center", va="top", fontsize=7, rotation=90)
        ax.set_xlabel("step")
        ax.set_ylabel(f"time ({unit})")
        ax.legend(handles=[Patch(color=c, label=PART_LABELS[p]) for p, c in PART_COLORS.items()],
                  loc="upper right", ncols=5, fontsize=8, frameon=False)
        fig.tight_layout()
        return png_bytes(fig, DPI)


def _add_bars(ax: Axes, x: np.ndarray, edges: list[np.ndarray], colors: list[str], width: float = 0.85) -> None:
    """Stacked bars (part i from edges[i] to edges[i + 1] at each x) as one PolyCollection, drawn
    and scaled as ax.bar draws its rectangles (a patch each: seconds for a few hundred steps)."""
    if not len(x):
        return
    left, right = x - width / 2, x + width / 2
    boxes, fill = [], []
    for low, top, color in zip(edges[:-1], edges[1:], colors):
        boxes.append(np.stack([np.column_stack([left, low]), np.column_stack([right, low]),
                               np.column_stack([right, top]), np.column_stack([left, top])], axis=1))
        fill += [color] * len(x)
    bars = PolyCollection(np.concatenate(boxes), facecolors=fill, edgecolors=fill, linewidths=0)
    bars.sticky_edges.y.extend(np.concatenate(edges[:-1]).tolist())  # as bar(): no margin below a bar's foot
    ax.add_collection(bars, autolim=False)
    ax.update_datalim([(left.min(), min(e.min() for e in edges)), (right.max(), max(e.max() for e in edges))])
    ax.autoscale_view()


def _stacked_steps(x: np.ndarray, edges: list[np.ndarray], colors: list[str]) -> PolyCollection:
    """The areas between consecutive ``edges`` (values at ``x``, steps half-way between),
    one polygon each, as fill_between(step="mid") draws them but in one collection: Agg
    draws a lone fill_between polygon of 36k vertices as a "marker", several times slower."""
    steps = cbook.pts_to_midstep(x, *edges)
    sx = steps[0]
    # a part that is zero at every step (no communication, say) has no area: not drawn
    drawn = [i for i in range(len(colors)) if (steps[i + 2] != steps[i + 1]).any()]
    polygons = [np.column_stack([np.concatenate([sx, sx[::-1]]), np.concatenate([steps[i + 2], steps[i + 1][::-1]])])
                for i in drawn]
    return PolyCollection(polygons, facecolors=[colors[i] for i in drawn], edgecolors=[colors[i] for i in drawn],
                          linewidths=0)


def steps_zoom_png(zoom: dict[str, Any]) -> bytes:
    """GPU work per stream in a few steps, with the step boundaries."""
    import matplotlib

    from profkit.report.figures import png_bytes, time_unit

    with matplotlib.rc_context(_RC):
        lanes = zoom["lanes"] or ["GPU"]
        fig = Figure(figsize=(WIDTH_IN, 1.2 + 0.35 * len(lanes)), dpi=DPI)
        ax = fig.add_subplot(1, 1, 1)
        lo, hi = zoom["start_ns"], zoom["end_ns"]
        divisor, unit = time_unit(hi - lo)
        least = (hi - lo) / divisor / (WIDTH_IN * DPI)  # at least one pixel wide
        events = zoom["events"]
        for row, lane in enumerate(lanes):
            mine = events[events["lane"] == lane]
            for kind, color in KIND_COLORS.items():
                of_kind = mine[mine["kind"] == kind]
                if len(of_kind):
                    s = (np.maximum(of_kind["start"].to_numpy(), lo) - lo) / divisor
                    w = np.maximum((np.minimum(of_kind["end"].to_numpy(), hi) - lo) / divisor - s, least)
                    ax.broken_barh(list(zip(s, w)), (row - 0.4, 0.8), facecolors=color, linewidth=0)
        for step in zoom["steps"]:
            xs = (step["start_ns"] - lo) / divisor
            ax.axvline(xs, color="black", linewidth=1.0)
            ax.text(xs, len(lanes) - 0.45, f" step {step['index']}", fontsize=8, va="bottom")
        ax.axvline((hi - lo) / divisor, color="black", linewidth=1.0)
        ax.set_yticks(range(len(lanes)), lanes)
        ax.set_ylim(-0.6, len(lanes) + 0.2)
        ax.set_xlim(0, (hi - lo) / divisor)
        ax.set_xlabel(f"time from step {zoom['steps'][0]['index']}'s start ({unit})")
        ax.legend(handles=[Patch(color=c, label=k) for k, c in KIND_COLORS.items()
                           if k != "graph" or (events["kind"] == k).any()], loc="upper right",
                  ncols=3, fontsize=8, frameon=False, bbox_to_anchor=(1.0, 1.25))
        fig.tight_layout()
        return png_bytes(fig, DPI)
