"""profkit's own Python frames in a capture: the launcher (``profkit/capture/launch.py``) and the
sync hook (``profkit/capture/sync_hook.py``) run inside the user's program.  They are not the
user's code, so host attribution treats them as transparent: their time goes to the caller.

A frame is profkit's when its file is a file of the installed profkit package, found by path (the
part after a ``profkit/`` folder names an existing file of the package), not by a list of names:
a new hook is transparent without being listed here.  Kineto records paths relative to
``sys.path`` ("profkit/capture/launch.py"), nsys absolute ones; both end the same way.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path, PurePosixPath

import numpy as np
import pandas as pd

PACKAGE_DIR = Path(__file__).resolve().parents[2]  # .../profkit
PACKAGE_NAME = PACKAGE_DIR.name


@lru_cache(maxsize=4096)
def is_profkit_file(path: str) -> bool:
    """Whether ``path`` (as a trace records it) is a file of the profkit package."""
    parts = PurePosixPath(path.replace("\\", "/")).parts
    for i, part in enumerate(parts[:-1]):
        if part == PACKAGE_NAME and PACKAGE_DIR.joinpath(*parts[i + 1:]).is_file():
            return True
    return False


def without_own_frames(frames: pd.DataFrame) -> pd.DataFrame:
    """``frames`` (``schema.PYTHON_FRAMES`` rows) less profkit's own: each instant then counts for
    the innermost frame of the user's code, the one that called into profkit."""
    files = frames["file"]
    categories = files.cat.categories if hasattr(files, "cat") else pd.Index(files.astype(str).unique())
    own = [c for c in categories if is_profkit_file(str(c))]
    if not own:
        return frames
    return frames[~np.asarray(files.isin(own), dtype=bool)]


__all__ = ["is_profkit_file", "without_own_frames"]
