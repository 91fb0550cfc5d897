"""profkit.allocator: the CLI's malloc settings keep big temporaries' memory for reuse
and hand it back on request (issue 10: page faults were a quarter of the report's CPU)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="glibc malloc settings")

CHURN = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from profkit import allocator

    configured = allocator.configure() if sys.argv[1] == "configured" else False
    if sys.argv[1] == "small_threshold":  # what the CLI set before: every array of 128 kB or more mmapped
        import ctypes
        ctypes.CDLL("libc.so.6").mallopt(-3, 128 * 1024)
    faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    # a report's pattern: temporaries made and dropped below long-lived columns
    first, second = np.ones(1_000_000), np.ones(1_000_000)
    column = np.ones(1_000_000)
    del first, second
    before = faults()
    for _ in range(40):  # 8 MB arrays, as a 1M-row column's
        values = np.ones(1_000_000); doubled = values * 2; del values, doubled
    churn = faults() - before
    kept = np.ones(4_000_000); del kept
    allocator.give_back()
    print(configured, churn)
""")


def _churn(mode: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True, check=True,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}).stdout.split()
    return out[0] == "True", int(out[1])


def test_configured_process_reuses_freed_arrays_instead_of_faulting_them_in_again() -> None:
    configured, faults = _churn("configured")
    if not configured:
        pytest.skip("not glibc")
    # 40 rounds of two 8 MB arrays are 160,000 fresh 4 kB pages when every free unmaps them
    # (fewer faults where the kernel maps 2 MB pages: 30,000-55,000 with the old setting);
    # arrays reusing the holes below a live one fault nothing (1 here)
    assert faults < 1_000


def test_a_fixed_small_mmap_threshold_faults_every_array_in_again() -> None:
    """The setting the CLI had before: the same churn costs a fault per page of every array."""
    if not _churn("configured")[0]:
        pytest.skip("not glibc")
    assert _churn("small_threshold")[1] > 10_000
