"""Annotated ranges (NVTX, ``record_function``) of a ``Trace``, named and timed as the summaries name them.

One place for the two rules every range analysis shares:

- the name: nsys's nvtx_sum prefixes the domain ("domain:text"; from nsys
  2024 on ":text" in the default domain, ``TraceMeta.nvtx_default_domain_prefix``);
  Kineto ranges are named by their text alone;
- the end of a range that never closed (``end == -1``): nvtx_sum ends it at
  the last timestamp of any NVTX event (``meta.extra["nvtx_last_timestamp_ns"]``,
  which the nsys reader records), nvtx_kern_sum at the last range timestamp
  (``open_end="ranges"``).

``cpu_ranges`` returns them as columns (a DataFrame), never as objects.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from profkit.model import NSYS, Trace
from profkit.model.schema import MISSING_INT

# Ranges drawn and summed as NVTX ranges: CPU-side annotations.  GPU-side
# copies (Kineto's gpu_user_annotation) repeat the CPU ones on a stream.
CPU_RANGE_KINDS = ("nvtx", "sync_site", "user_annotation", "profiler_step")


def range_labels(trace: Trace, name: pd.Categorical, domain: pd.Categorical) -> pd.Categorical:
    """Each range's name as the NVTX summary prints it ("" text -> missing)."""
    prefix_default = trace.meta.nvtx_default_domain_prefix
    nsys = trace.meta.source == NSYS
    name = pd.Categorical(name)
    domain = pd.Categorical(domain)
    n_domains = max(len(domain.categories), 1)
    pair = name.codes.astype(np.int64) * n_domains + np.maximum(domain.codes, 0)
    distinct, codes = np.unique(pair, return_inverse=True)
    labels: list[str | None] = []
    for value in distinct.tolist():
        text = name.categories[value // n_domains] if value >= 0 else ""
        dom = domain.categories[value % n_domains] if len(domain.categories) else ""
        if not text:
            labels.append(None)
        elif nsys and (dom or prefix_default):
            labels.append(f"{dom}:{text}")
        else:
            labels.append(text)
    return _categorical(codes, labels)


def _categorical(codes: np.ndarray, labels: Sequence[str | None]) -> pd.Categorical:
    """Codes into ``labels`` (which may repeat, or be None = missing) as a Categorical."""
    categories: dict[str, int] = {}
    remap = np.array([-1 if label is None else categories.setdefault(label, len(categories)) for label in labels],
                     dtype=np.int64)
    return pd.Categorical.from_codes(remap[codes] if len(codes) else np.zeros(0, dtype=np.int64), list(categories))


def cpu_ranges(trace: Trace, columns: Sequence[str] = (), open_end: str = "nvtx_sum") -> pd.DataFrame:
    """CPU-side ranges with ``label`` (the summary's name), ``start``, ``end`` (open ranges
    closed as ``open_end`` says: "nvtx_sum" or "ranges") and ``columns`` of the ranges table.

    Rows keep the table's order; ``row`` is each range's row in the table."""
    if not trace.has("ranges"):
        return pd.DataFrame({"row": np.zeros(0, dtype=np.int64), "label": pd.Categorical([]),
                             "start": np.zeros(0, dtype=np.int64), "end": np.zeros(0, dtype=np.int64),
                             **{c: [] for c in columns}})
    wanted = ["start", "end", "name", "domain", "kind", *[c for c in columns if c not in ("start", "end")]]
    frame = trace.table("ranges", list(dict.fromkeys(wanted)))
    keep = np.asarray(frame["kind"].isin(CPU_RANGE_KINDS))
    start = frame["start"].to_numpy()
    end = frame["end"].to_numpy()
    open_ = end == MISSING_INT
    if open_.any():
        if open_end == "nvtx_sum" and trace.meta.extra.get("nvtx_last_timestamp_ns") is not None:
            last = int(trace.meta.extra["nvtx_last_timestamp_ns"])
        else:
            last = int(max(start.max(initial=0), end.max(initial=0)))
        end = np.where(open_, last, end)
    rows = np.flatnonzero(keep)
    out = pd.DataFrame({
        "row": rows,
        "label": range_labels(trace, frame["name"].array[rows], frame["domain"].array[rows]),
        "start": start[rows],
        "end": end[rows],
    })
    for column in columns:
        if column not in ("start", "end"):
            out[column] = frame[column].to_numpy()[rows] if not isinstance(frame[column].dtype, pd.CategoricalDtype) \
                else frame[column].array[rows]
    return out
