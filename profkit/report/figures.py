"""The report's figures, drawn with matplotlib (Agg) into PNG data URIs.

Each function takes plain data from ``profkit.analysis.timeline.busy`` and returns
PNG bytes; ``data_uri`` makes them embeddable.  Text from the export
(kernel names, NVTX ranges) is drawn with math parsing off, so a "$" in a
name is just a character.
"""

from __future__ import annotations

import base64
import contextlib
import io
import sys
import zlib
from collections.abc import Sequence
from types import ModuleType

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import Patch

from profkit.analysis.timeline.busy import StreamActivity, TimeBins, Utilization
from profkit.analysis.timeline.ranges import NvtxBar
from profkit.model.clock import SESSION_START, seconds_text
from profkit.report.text import duration as _duration

# one colour per kind of GPU work, in every figure of the report
KIND_COLORS = {"kernel": "#1f6fb4", "memcpy": "#d1495b", "memset": "#8e6bbf", "graph": "#2a9d8f"}
NVTX_PALETTE = [matplotlib.colormaps["tab20"](i) for i in range(20)]
DPI = 100
WIDTH_IN = 12.0
MAX_NVTX_ROWS = 14  # NVTX levels drawn above the streams, all threads together
MAX_STREAM_ROWS = 24
MAX_DEVICE_PANELS = 2  # more devices share one panel per view, one line each
# Text taken from input (kernel names, labels, commits) is plain: a "$" would start math text,
# which fails on "$\frac{a}$" (a traceback) and is no name's meaning.  Every figure draws inside it.
PLAIN_TEXT = {"text.parse_math": False, "text.usetex": False}
_RC = {**PLAIN_TEXT, "font.size": 9, "svg.fonttype": "none"}
# A fixed layout, in inches, instead of layout="constrained" (whose passes over every tick and
# label cost a third of a figure): the margins it gave with the 9-pt font of _RC.
PAD_IN = 3 / 72  # at the figure's edges
Y_TICKS_IN = 7 / 72  # a y tick and its label's pad (3.5 pt each), left of the tick labels
BOTTOM_IN = 0.459  # x tick labels and the x label
TOP_IN = 0.242  # a legend above the axes (the timeline)
TITLE_IN = 0.239  # a title alone
Y_LABELLED_IN = 0.574  # y tick labels 0 to 100 and a y label (the utilization panels)


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def __getattr__(name: str) -> ModuleType:
    """``plt``: pyplot, imported (with the Agg backend) only for the callers that draw with it
    (ranks, history); the report's figures are bare Figures and never import it."""
    if name == "plt":
        matplotlib.use("Agg")  # no display, no GUI toolkit; must precede pyplot
        from matplotlib import pyplot

        return pyplot
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def plain_text() -> contextlib.AbstractContextManager:
    """matplotlib settings under which every text is drawn as given (no math text, no TeX)."""
    return matplotlib.rc_context(PLAIN_TEXT)


def png_bytes(fig: Figure, dpi: float = DPI) -> bytes:
    """A figure (a bare ``matplotlib.figure.Figure``, or pyplot's) as PNG bytes, with no
    software stamp so that reruns give equal bytes; closes it where pyplot holds it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close(fig)
    return buf.getvalue()


def _text_width_in(canvas: FigureCanvasAgg, texts: Sequence[str]) -> float:
    """Width of the widest of ``texts`` in the current font (inches)."""
    renderer, font = canvas.get_renderer(), FontProperties()
    widths = [renderer.get_text_width_height_descent(t, font, ismath=False)[0] for t in texts]
    return max(widths, default=0.0) / canvas.figure.dpi


def _fixed_layout(fig: Figure, axes: Sequence[Axes], left_in: float, top_in: float = TOP_IN) -> None:
    """Place ``axes`` one above the other: ``left_in`` for the y labels, BOTTOM_IN and TOP_IN
    for each one's x labels and title, and on the right room for the last x tick label
    where it sticks out past the axes' end (what constrained layout did, in one pass)."""
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    width, height = fig.get_size_inches()
    right_in = PAD_IN
    for ax in axes:
        lo, hi = ax.get_xlim()
        ticks = [t for t in ax.xaxis.get_majorticklocs() if lo <= t <= hi]
        if ticks and hi > lo:
            label = ax.xaxis.get_major_formatter().format_ticks(ticks)[-1]
            room = (hi - ticks[-1]) / (hi - lo) * (width - left_in - PAD_IN)
            right_in = max(right_in, PAD_IN + _text_width_in(canvas, [label]) / 2 - room)
    n = len(axes)
    panel = (height - n * (BOTTOM_IN + top_in)) / n
    fig.subplots_adjust(left=left_in / width, right=1 - right_in / width, bottom=BOTTOM_IN / height,
                        top=1 - top_in / height, hspace=(BOTTOM_IN + top_in) / panel)


def time_unit(span_ns: float) -> tuple[float, str]:
    """Divisor and unit for an axis of times over ``span_ns``."""
    if span_ns >= 2e9:
        return 1e9, "s"
    if span_ns >= 2e6:
        return 1e6, "ms"
    return 1e3, "µs"


def time_axis(bins: TimeBins) -> tuple[float, str]:
    """Divisor and unit for times relative to the window start."""
    return time_unit(bins.width_ns * bins.count)


def _x(bins: TimeBins, divisor: float) -> np.ndarray:
    return (bins.edges() - bins.start_ns) / divisor


def _step(values: np.ndarray) -> np.ndarray:
    # fill_between(step="post") wants one y per edge: repeat the last bin.
    return np.append(values, values[-1]) if len(values) else values


def lane_label(lane: StreamActivity, processes_matter: bool) -> str:
    stream = "?" if lane.stream_id is None else lane.stream_id
    label = f"GPU {lane.device_id} stream {stream}"
    return f"{label} (pid {lane.pid})" if processes_matter else label


def _nvtx_rows(bars: Sequence[NvtxBar]) -> tuple[list[tuple[NvtxBar, int]], list[str], int]:
    """(bar, row) pairs, row labels top to bottom, and how many bars did not fit."""
    threads: dict[int | None, list[NvtxBar]] = {}
    for bar in sorted(bars, key=lambda b: b.start_ns):
        threads.setdefault(bar.tid, []).append(bar)
    placed, labels, dropped, row = [], [], 0, 0
    for tid, group in threads.items():
        levels = max(b.depth for b in group) + 1
        room = MAX_NVTX_ROWS - row
        if room <= 0:
            dropped += len(group)
            continue
        shown = min(levels, room)
        for level in range(shown):
            labels.append(("ranges" if tid is None else f"tid {tid}") if level == 0 else
                          f"level {level + 1}")
        for bar in group:
            if bar.depth < shown:
                placed.append((bar, row + bar.depth))
            else:
                dropped += 1
        row += shown
    return placed, labels, dropped


def _nvtx_color(text: str | None) -> tuple:
    return NVTX_PALETTE[zlib.crc32((text or "").encode()) % len(NVTX_PALETTE)]


def timeline_png(bins: TimeBins, lanes: Sequence[StreamActivity], bars: Sequence[NvtxBar], title: str,
                 boundaries: Sequence[int] = ()) -> bytes:
    """Streams as rows (kernel, memcpy, memset busy share per bin), NVTX ranges above them,
    and ``boundaries`` (ns, e.g. where steps start and end) as dashed vertical lines.

    A light column marks a bin with any activity (so a 2 µs kernel in a
    5 ms bin still shows); the solid fill is the share of the bin that was
    busy.  White is idle.
    """
    divisor, unit = time_axis(bins)
    x = _x(bins, divisor)
    busy: dict[tuple, int] = {}
    for lane in lanes:
        key = (lane.device_id, lane.pid, lane.stream_id)
        busy[key] = busy.get(key, 0) + lane.busy_ns
    # The busiest streams, in device/stream order; the rest are named in a note.
    kept = set(sorted(busy, key=lambda k: -busy[k])[:MAX_STREAM_ROWS])
    streams = [key for key in busy if key in kept]
    hidden = len(busy) - len(streams)
    processes_matter = len({(d, s) for d, _, s in streams}) < len(streams)
    placed, nvtx_labels, dropped = _nvtx_rows(bars)
    n_nvtx, n_streams = len(nvtx_labels), max(len(streams), 1)
    height = 1.4 + 0.55 * n_streams + 0.3 * n_nvtx
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(WIDTH_IN, height), dpi=DPI)
        ax = fig.subplots()
        labels: list[str] = []
        # streams bottom-up: row 0 is the first stream, drawn at the top of its block
        for i, key in enumerate(streams):
            y0 = n_streams - 1 - i
            for lane in (ln for ln in lanes if (ln.device_id, ln.pid, ln.stream_id) == key):
                color = KIND_COLORS[lane.kind]
                share = lane.busy_per_bin / bins.width_ns
                ax.fill_between(x, y0 + 0.1, y0 + 0.1 + 0.8 * _step((share > 0).astype(float)), step="post",
                                color=color, alpha=0.22, linewidth=0)
                ax.fill_between(x, y0 + 0.1, y0 + 0.1 + 0.8 * _step(np.minimum(share, 1.0)), step="post",
                                color=color, linewidth=0)
            labels.append(lane_label(next(ln for ln in lanes if (ln.device_id, ln.pid, ln.stream_id) == key),
                                     processes_matter))
        if not streams:
            labels.append("no GPU activity")
        ticks = [n_streams - 1 - i + 0.5 for i in range(len(labels))]
        if n_nvtx:
            base = n_streams + 0.3
            ax.axhline(base - 0.15, color="#999999", linewidth=0.6)
            width_px = WIDTH_IN * DPI * 0.8
            span = x[-1] - x[0] if len(x) else 1.0
            boxes, colors = [], []  # one collection, not a barh patch per range (up to 2000)
            for bar, row in placed:
                y = base + (n_nvtx - 1 - row) * 0.6
                left = (max(bar.start_ns, bins.start_ns) - bins.start_ns) / divisor
                right = (min(bar.end_ns, bins.end_ns) - bins.start_ns) / divisor
                low, end = y + 0.27 - 0.25, left + (right - left)  # as barh(y + 0.27, height=0.5) places it
                boxes.append([(left, low), (end, low), (end, low + 0.5), (left, low + 0.5)])
                colors.append(_nvtx_color(bar.text))
                chars = int((right - left) / span * width_px / 6.5)
                text = bar.text or ""
                if chars >= 4 and text:
                    shown = text if len(text) <= chars else text[: chars - 1] + "…"
                    ax.text(left + (right - left) / 2, y + 0.27, shown, ha="center", va="center", fontsize=7,
                            clip_on=True)
            if boxes:
                ax.add_collection(PolyCollection(boxes, facecolors=colors, edgecolors="white", linewidths=0.3),
                                  autolim=False)  # the limits are set below
            for row, label in enumerate(nvtx_labels):
                ticks.append(base + (n_nvtx - 1 - row) * 0.6 + 0.27)
                labels.append(label)
            top = base + n_nvtx * 0.6
        else:
            top = n_streams
        for at in sorted(set(boundaries)):
            if bins.start_ns <= at <= bins.end_ns:
                ax.axvline((at - bins.start_ns) / divisor, color="#444444", linestyle="--", linewidth=0.8)
        ax.set_yticks(ticks, labels)
        ax.set_ylim(0, top)
        ax.set_xlim(x[0], x[-1])
        ax.set_xlabel(f"time ({unit}) from {seconds_text(bins.start_ns - bins.origin_ns)} {SESSION_START}; "
                      f"bin = {_duration(bins.width_ns)}")
        ax.set_title(title, loc="left")
        ax.grid(axis="x", color="#e5e5e5", linewidth=0.5)
        ax.set_axisbelow(True)
        kinds = [k for k in KIND_COLORS if any(ln.kind == k for ln in lanes)]
        handles = [Patch(color=KIND_COLORS[k], label=k) for k in kinds]
        if handles:
            handles.append(Patch(color="#bbbbbb", alpha=0.5, label="light: some work in the bin"))
            ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=len(handles),
                      fontsize=7, frameon=False, borderaxespad=0.2)
        left_out = [f"{dropped} deeper NVTX ranges"] if dropped else []
        left_out += [f"{hidden} quieter streams"] if hidden else []
        if left_out:
            ax.text(1.0, -0.02, " and ".join(left_out) + " not drawn", transform=ax.transAxes,
                    ha="right", va="top", fontsize=7, color="#666666")
        canvas = FigureCanvasAgg(fig)
        _fixed_layout(fig, [ax], PAD_IN + _text_width_in(canvas, labels) + Y_TICKS_IN)
        return png_bytes(fig)


def utilization_png(views: Sequence[tuple[TimeBins, Sequence[Utilization], str]]) -> bytes:
    """Busy % per bin for each device, its average, and the longest idle gaps shaded.

    A view is (bins, utilization, title), e.g. the whole capture and a zoom
    on its busiest part.  Up to MAX_DEVICE_PANELS devices get a panel each
    per view; more share one panel per view, a line each.
    """
    panels: list[tuple[TimeBins, list[Utilization], str]] = []
    for bins, utils, title in views:
        if len(utils) > MAX_DEVICE_PANELS:
            panels.append((bins, list(utils), title))
        else:
            panels += [(bins, [util], title) for util in utils] or [(bins, [], title)]
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(WIDTH_IN, 0.6 + 2.1 * max(len(panels), 1)), dpi=DPI)
        axes = fig.subplots(max(len(panels), 1), 1, squeeze=False)
        for ax, (bins, utils, title) in zip(axes[:, 0], panels):
            divisor, unit = time_axis(bins)
            x = _x(bins, divisor)
            ax.set_xlim(x[0], x[-1])
            ax.set_ylim(0, 100)
            ax.set_title(title, loc="left")
            ax.set_xlabel(f"time ({unit}) from {seconds_text(bins.start_ns - bins.origin_ns)} {SESSION_START}; "
                          f"bin = {_duration(bins.width_ns)}")
            ax.grid(color="#e5e5e5", linewidth=0.5)
            ax.set_axisbelow(True)
            if not utils:
                ax.text(0.5, 0.5, "no GPU activity", ha="center", va="center", transform=ax.transAxes)
            elif len(utils) == 1:
                _one_device(ax, bins, utils[0], x, divisor)
            else:
                for util in utils:
                    mean = 100.0 * util.busy_ns / (bins.width_ns * bins.count)
                    ax.step(x, _step(100.0 * util.busy_per_bin / bins.width_ns), where="post", linewidth=0.8,
                            label=f"GPU {util.device_id} (average {mean:.2f}%)")
                ax.set_ylabel("busy %")
                ax.set_ylim(0, 105)  # a line at 100% would hide in the frame
                ax.legend(loc="upper right", fontsize=7, ncols=min(len(utils), 4), framealpha=0.85)
        _fixed_layout(fig, list(axes[:, 0]), Y_LABELLED_IN, TITLE_IN)
        return png_bytes(fig)


def _one_device(ax: Axes, bins: TimeBins, util: Utilization, x: np.ndarray, divisor: float) -> None:
    pct = 100.0 * util.busy_per_bin / bins.width_ns
    ax.fill_between(x, 0, _step(pct), step="post", color=KIND_COLORS["kernel"], linewidth=0)
    mean = 100.0 * util.busy_ns / (bins.width_ns * bins.count)
    ax.axhline(mean, color="#333333", linestyle="--", linewidth=0.8)
    ax.text(x[0], mean, f" average {mean:.2f}%", va="bottom", ha="left", fontsize=7)
    for start, end in util.gaps:
        if end - start < 0.02 * bins.width_ns * bins.count:
            continue
        left = (max(start, bins.start_ns) - bins.start_ns) / divisor
        right = (min(end, bins.end_ns) - bins.start_ns) / divisor
        ax.axvspan(left, right, color="#f2c14e", alpha=0.25, linewidth=0)
        ax.text((left + right) / 2, 92, f"idle {_duration(end - start)}", ha="center", va="top",
                fontsize=7, color="#7a5a00", clip_on=True)
    ax.set_ylabel(f"GPU {util.device_id} busy %")
