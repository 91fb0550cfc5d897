"""The --metrics list of the roofline fixtures (scripts/make_roofline_fixtures.sh).

Usage: python3 scripts/roofline_metrics.py full|mid|safe METRICS_ALL.txt [METRICS_BASE.txt]

METRICS_ALL.txt is `ncu --query-metrics --query-metrics-mode all` of the GPU
(full names with suffixes), METRICS_BASE.txt `ncu --query-metrics` (base names).
Prints one comma-separated list on stdout and what it kept or dropped on stderr.

safe: metrics that ncu's own roofline sections request, or that profkit already
      collects, on every chip since Volta: never checked against the listing.
full: safe plus the tensor-core counters (every sm__ops_path_tensor_src_* the
      chip has, with .sum, .sum.per_second and .sum.peak_sustained) and further
      peaks and rates, each kept only when the listing has it, so that a name
      this chip lacks cannot make ncu refuse the whole capture.  When a listing
      is missing or holds no second-level suffixes, base names decide, and with
      no listing at all the tensor counters come from `regex:` (ncu expands it).
mid:  safe plus the tensor-core counters' .sum only (the fallback when ncu
      refuses the full list).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

FLOP_OPS = ("ffma", "fadd", "fmul", "dfma", "dadd", "dmul", "hfma", "hadd", "hmul")

SAFE = [
    "gpu__time_duration.sum",
    "dram__bytes.sum",
    "dram__bytes.sum.per_second",
    "dram__bytes.sum.peak_sustained",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "sm__cycles_elapsed.avg.per_second",
    "lts__t_bytes.sum",
    "l1tex__t_bytes.sum",
    *(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in FLOP_OPS),
    # the per-cycle peaks ncu's SpeedOfLight_RooflineChart multiplies by the clock
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
    "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained",
    "sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained",
]

MAYBE = [
    "smsp__cycles_elapsed.avg.per_second",
    "sm__inst_executed_pipe_tensor.sum.peak_sustained",
    "lts__t_bytes.sum.per_second",
    "lts__t_bytes.sum.peak_sustained",
    "l1tex__t_bytes.sum.per_second",
    "l1tex__t_bytes.sum.peak_sustained",
    "sm__cycles_elapsed.avg",
    "gpc__cycles_elapsed.avg.per_second",
    "dram__cycles_elapsed.avg.per_second",
    "sm__inst_executed_pipe_tensor.sum",
    "sm__pipe_tensor_cycles_active.sum",
    "sm__pipe_fma_cycles_active.sum",
    *(f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum.peak_sustained"
      for op in FLOP_OPS if op not in ("ffma", "dfma", "hfma")),
]

TENSOR_PREFIX = "sm__ops_path_tensor_src_"
TENSOR_SUFFIXES = (".sum", ".sum.per_second", ".sum.peak_sustained")
TENSOR_FULL = re.compile(r"^sm__ops_path_tensor_src_[a-z0-9_]+\.sum(\.per_second|\.peak_sustained)?$")
TENSOR_REGEX = r"regex:^sm__ops_path_tensor_src_.*\.sum$"
NAME = re.compile(r"^[a-z0-9]+__[a-z0-9_.]+$")


def names(path: str | None) -> set[str]:
    """Metric names in an `ncu --query-metrics` listing: the first word of each table row."""
    if not path or not Path(path).is_file():
        return set()
    found = set()
    for line in Path(path).read_text(errors="replace").splitlines():
        words = line.split()
        if words and NAME.match(words[0]):
            found.add(words[0])
    return found


def select(mode: str, all_path: str | None, base_path: str | None) -> list[str]:
    chosen = list(SAFE)
    if mode == "safe":
        return chosen
    full = names(all_path)
    base = names(base_path) | {n.split(".")[0] for n in full}
    has_full = any(n.endswith(".sum.per_second") for n in full)

    def listed(metric: str) -> bool:
        if has_full:
            return metric in full
        if base:
            return metric.split(".")[0] in base
        return True  # no listing: try it (the capture falls back to "safe" if ncu refuses)

    if mode == "full":
        for metric in MAYBE:
            (chosen.append if listed(metric) else note_dropped)(metric)
    if has_full:
        tensor = sorted(n for n in full if TENSOR_FULL.match(n))
    else:
        tensor = [b + s for b in sorted(n for n in base if n.startswith(TENSOR_PREFIX) and "." not in n)
                  for s in TENSOR_SUFFIXES]
    if mode == "mid":
        tensor = [t for t in tensor if t.endswith(".sum")]
    if tensor:
        chosen += tensor
    else:
        print(f"no {TENSOR_PREFIX}* names in the listing: asking ncu for {TENSOR_REGEX}", file=sys.stderr)
        chosen.append(TENSOR_REGEX)
    seen: set[str] = set()
    return [m for m in chosen if not (m in seen or seen.add(m))]


def note_dropped(metric: str) -> None:
    print(f"not in this chip's listing, left out: {metric}", file=sys.stderr)


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in ("full", "mid", "safe"):
        raise SystemExit(__doc__)
    chosen = select(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    print(f"{sys.argv[1]}: {len(chosen)} metrics", file=sys.stderr)
    print(",".join(chosen))


if __name__ == "__main__":
    main()
