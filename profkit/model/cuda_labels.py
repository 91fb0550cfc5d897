"""Labels of CUDA's enum values and API names, as nsys and Kineto print them.

Readers label their rows with these (the nsys reader falls back on them where an
export lacks its ENUM_* tables) and the stall analysis reads the same labels back,
so they live here, below both.
"""

from __future__ import annotations

# CUPTI enum values (cupti_activity.h), used when an export lacks the ENUM_* tables.
MEM_KIND_LABELS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
                   5: "Device Static", 6: "Managed Static", 7: "Unknown"}
COPY_KIND_LABELS = {0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
                    4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
                    8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer", 11: "Unified Host-to-Device",
                    12: "Unified Device-to-Host", 13: "Unified Device-to-Device"}
SYNC_TYPE_LABELS = {0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync", 4: "Context sync"}


def normalize_api_name(name: str) -> str:
    """Drop a CUDA API version suffix: ``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``.

    Same rule as nsys's cuda_api_sum.py: the suffix is exactly ``_v`` and
    four more characters (``substr(value, -6, 2) == '_v'``)."""
    if len(name) >= 6 and name[-6:-4] == "_v":
        return name[:-6]
    return name


# nsys --cuda-memory-usage: the device memory a loaded kernel module's __device__ variables take
# (memory kind "Device Static"), allocated by no CUDA call of the program's.  The reader names
# such rows' stack with it; the memory analysis counts them apart.
MODULE_GLOBALS = "kernel modules' __device__ variables (loaded with the module)"
# TraceMeta.extra["memory_level"] of a trace whose memory rows are the driver's allocations (nsys
# --cuda-memory-usage), not an allocator's blocks: the reader sets it, the memory analysis reads it
DRIVER_MEMORY_LEVEL = "driver"
