"""The sync-stalls timeline: where the CPU waited, and the GPU idle gaps that followed.

``stalls_timeline_png(timeline)`` draws a ``profkit.analysis.sync.stalls.Timeline``
(get one with ``stalls.timeline(export, report)``) and returns PNG bytes:

- a CPU lane with each sync as a red bar (the time its calls took) and the
  first sync of each call site labelled "file.py:LINE (cause)";
- a GPU lane with kernels, memcpys and memsets, and the idle gaps the syncs
  caused as hatched orange spans;
- the step ranges as alternating shaded bands.

Text from the export is drawn with math parsing off ("$" is a character).
"""

from __future__ import annotations


from matplotlib.figure import Figure
from matplotlib.patches import Patch

from profkit.analysis.sync.stalls import Timeline
from profkit.model.clock import SESSION_START, seconds_text
from profkit.report.figures import KIND_COLORS

SYNC_COLOR = "#c0392b"
IDLE_COLOR = "#f39c12"
STEP_SHADE = "#eef2f7"
_RC = {"text.parse_math": False, "text.usetex": False, "font.size": 9}
CPU_LANE, GPU_LANE, LANE_HEIGHT = 2.0, 0.0, 0.8
MAX_LABELS = 12  # site labels drawn; more would pile on each other


def stalls_timeline_png(timeline: Timeline, *, width_in: float = 12.0, height_in: float = 3.6,
                        dpi: int = 100, zero_ns: int = 0) -> bytes:
    """PNG bytes of the timeline (see the module docstring); ``zero_ns``: the trace time of the
    session start (``profkit.model.clock.session_zero``), which the time axis counts from."""
    import matplotlib

    from profkit.report.figures import png_bytes, time_unit

    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(width_in, height_in), dpi=dpi)
        ax = fig.add_subplot(1, 1, 1)
        divisor, unit = time_unit(timeline.end - timeline.start)

        def x(t: int) -> float:
            return (t - timeline.start) / divisor

        def spans(pairs: list[tuple[int, int]]) -> list[tuple[float, float]]:
            # a zero-width span would vanish: draw it at least one pixel wide
            least = (timeline.end - timeline.start) / divisor / (width_in * dpi)
            return [(x(s), max((e - s) / divisor, least)) for s, e in pairs]

        for k, (index, start, end) in enumerate(timeline.steps):
            if k % 2 == 0:
                ax.axvspan(x(start), x(end), color=STEP_SHADE, zorder=0)
            ax.text(x(max(start, timeline.start)), CPU_LANE + LANE_HEIGHT + 0.15, f"step {index}",
                    fontsize=8, color="#555555", clip_on=True)
        for kind, color in KIND_COLORS.items():
            pairs = [(s, e) for k, s, e in timeline.gpu if k == kind]
            if pairs:
                ax.broken_barh(spans(pairs), (GPU_LANE, LANE_HEIGHT), facecolors=color, zorder=2)
        idle = [(s["idle_start"], s["idle_end"]) for s in timeline.syncs
                if s["idle_start"] is not None and s["idle_end"] is not None and s["idle_end"] > s["idle_start"]]
        if idle:
            ax.broken_barh(spans(idle), (GPU_LANE - 0.1, LANE_HEIGHT + 0.2), facecolors="none",
                           edgecolors=IDLE_COLOR, hatch="////", linewidth=1.0, zorder=3)
        if timeline.syncs:
            ax.broken_barh(spans([(s["start"], s["end"]) for s in timeline.syncs]), (CPU_LANE, LANE_HEIGHT),
                           facecolors=SYNC_COLOR, zorder=2)
        # One label per call site, spread evenly between the lanes (sites
        # often sync microseconds apart), with a line to its first sync.
        firsts: dict[str, int] = {}
        for s in timeline.syncs:
            if s["start"] >= timeline.start and len(firsts) < MAX_LABELS:
                firsts.setdefault(s["label"], s["start"])
        levels = (CPU_LANE - 0.3, CPU_LANE - 0.65, CPU_LANE - 1.0)
        for k, (label, start) in enumerate(sorted(firsts.items(), key=lambda item: item[1])):
            ax.annotate(label, xy=(x(start), CPU_LANE), xytext=(0.01 + 0.85 * k / max(len(firsts), 1), levels[k % 3]),
                        textcoords=("axes fraction", "data"), fontsize=7, color=SYNC_COLOR, va="center", zorder=4,
                        arrowprops={"arrowstyle": "-", "color": SYNC_COLOR, "linewidth": 0.5})
        ax.set_xlim(0, (timeline.end - timeline.start) / divisor)
        ax.set_ylim(GPU_LANE - 0.4, CPU_LANE + LANE_HEIGHT + 0.6)
        device = "?" if timeline.device is None else timeline.device
        ax.set_yticks([GPU_LANE + LANE_HEIGHT / 2, CPU_LANE + LANE_HEIGHT / 2],
                      [f"GPU {device}", "CPU syncs"])
        ax.set_xlabel(f"time ({unit}) from {seconds_text(timeline.start - zero_ns)} {SESSION_START}")
        ax.set_title(timeline.title, fontsize=9, loc="left")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        handles = [Patch(facecolor=c, label=k) for k, c in KIND_COLORS.items()
                   if any(g[0] == k for g in timeline.gpu)]
        handles += [Patch(facecolor=SYNC_COLOR, label="sync (CPU waiting)"),
                    Patch(facecolor="none", edgecolor=IDLE_COLOR, hatch="////", label="GPU idle caused")]
        ax.legend(handles=handles, loc="upper right", fontsize=7, ncols=len(handles), frameon=False,
                  bbox_to_anchor=(1.0, 1.18))
        fig.tight_layout()
        return png_bytes(fig, dpi)
