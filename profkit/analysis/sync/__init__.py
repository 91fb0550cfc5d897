"""Sync: which lines synchronize the CPU with the GPU, and what does each one cost?

Entry: ``stalls.analyze_stalls(trace) -> StallReport``.  The parts, in the order data flows:

- ``calls``: which CUDA calls can block, and the small records (``ApiCall``, ``NvtxRange``);
- ``inputs``: those records and the GPU activity, built from a ``Trace``'s columns;
- ``ranges``: the annotated CPU ranges as columns, and the ranges around each sync;
- ``events``: sync events from plain data: detection, Python sites, steps;
- ``idle``: the GPU idle time each sync event caused;
- ``stalls``: aggregation per call site and per range, step prices, findings.
"""
