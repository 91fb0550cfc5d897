"""Which Python frames load data: a step's host time in them is data loading, not framework overhead.

Recognised from the frames themselves (no annotation needed):

- any frame of ``torch/utils/data/`` (a DataLoader, its fetcher, collate, workers);
- in the user's loop (the files of the frames that stay open over every steady step, e.g. the
  script's ``main``), a function named like loading: ``__next__``, ``__getitem__``, ``__iter__``,
  ``collate*``, ``load``/``fetch``/``read`` as a word (``load_data``), or ``get_batch``,
  ``load_batch``, ``next_batch``, ``make_batch``, ... .  Library code is left out on purpose: a
  ``ModuleList.__getitem__`` or a ``batch_norm`` is not data loading.

A step's time counts as data loading while any such frame is on the stack (what it calls
included: the tensors a loader builds are part of loading the batch).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

LOADER_FILES = ("torch/utils/data/",)
LOADER_NAME = re.compile(r"__next__|__getitem__|__iter__|collate|(^|_)(load|fetch|read)(_|$)"
                         r"|(get|next|make|build|prepare|sample|load|fetch|read)_?batch", re.IGNORECASE)


def loop_files(frames: pd.DataFrame, first_ns: int, last_ns: int) -> set[str]:
    """The files of the frames open from ``first_ns`` to ``last_ns`` (the user's loop and its callers)."""
    open_all = (frames["start"].to_numpy(np.int64) <= first_ns) & (frames["end"].to_numpy(np.int64) >= last_ns)
    return set(frames["file"].astype(str).to_numpy()[open_all].tolist())


def is_loading(function: str, file: str, user_files: set[str]) -> bool:
    """Whether a frame of ``function`` in ``file`` loads data (see the module docstring)."""
    if function == "<module>":  # importing torch.utils.data loads no data
        return False
    path = file.replace("\\", "/")
    if any(folder in path for folder in LOADER_FILES):
        return True
    return file in user_files and LOADER_NAME.search(function) is not None


def loading_mask(frames: pd.DataFrame, user_files: set[str]) -> np.ndarray:
    """Per frame row: whether it loads data."""
    pairs = frames[["function", "file"]].astype(str).drop_duplicates()
    loading = {(fn, f) for fn, f in zip(pairs["function"], pairs["file"]) if is_loading(fn, f, user_files)}
    if not loading:
        return np.zeros(len(frames), dtype=bool)
    keys = zip(frames["function"].astype(str), frames["file"].astype(str))
    return np.fromiter((k in loading for k in keys), dtype=bool, count=len(frames))


__all__ = ["LOADER_FILES", "is_loading", "loading_mask", "loop_files"]
