"""Whose were the bytes a driver-level trace (nsys ``--cuda-memory-usage``) saw the process hold?

nsys records every device allocation the process made from the driver.  PyTorch's caching
allocator is one client: it takes segments (2 MiB for small blocks, 20 MiB or the request rounded
to 2 MiB for large ones) and hands out blocks inside them.  Libraries take memory for themselves
beside it: a cuBLAS / cuBLASLt handle's own buffers, NCCL's, CUDA graphs' pools, and the
``__device__`` variables of each loaded kernel module.  So the process's figure is larger than the
allocator's reserved bytes, by what the libraries hold (on the GPT fixture: 212 MiB held against
84 MiB reserved).

A snapshot of the same run (``torch.cuda.memory._record_memory_history`` + ``_dump_snapshot``, as
``profkit trace --memory`` writes) lists the allocator's segments by address and size.  An
allocation nsys saw at exactly such an address and size is the allocator's; any other is not.
Without a snapshot, allocations are told apart only by the call that made them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from profkit.model.cuda_labels import DRIVER_MEMORY_LEVEL, MODULE_GLOBALS

LEVEL = DRIVER_MEMORY_LEVEL  # TraceMeta.extra["memory_level"] of a trace whose memory rows are the driver's
CACHING_ALLOCATOR = "PyTorch's caching allocator (its segments: the reserved bytes)"
OUTSIDE = "outside PyTorch's caching allocator (allocated by a library or the program itself)"
UNSPLIT = "device allocations ({call}: PyTorch's caching allocator and libraries' own, not told apart " \
          "without a snapshot)"


def owners(addr: np.ndarray, size: np.ndarray, calls: Sequence[str], device: int,
           segments: Sequence[Sequence[int]] | None) -> np.ndarray:
    """Whose each allocation is: the caching allocator's (a snapshot segment of its device at its
    address, of its size), outside it, or a module's globals; without ``segments``, by its call."""
    mine = {(int(a), int(n)) for d, a, n in segments or () if int(d) == device}
    out = np.empty(len(addr), dtype=object)
    for i, (a, n, call) in enumerate(zip(addr, size, calls)):
        if call == MODULE_GLOBALS:
            out[i] = MODULE_GLOBALS
        elif segments is None:
            out[i] = UNSPLIT.format(call=call)
        else:
            out[i] = CACHING_ALLOCATOR if (int(a), int(n)) in mine else OUTSIDE
    return out


__all__ = ["CACHING_ALLOCATOR", "LEVEL", "OUTSIDE", "owners"]
