"""Readers: one per source format, each filling the trace model (``profkit.model``).

- ``nsys``: Nsight Systems SQLite exports (schemas 3.7 and 3.20 and between);
- ``kineto``: torch.profiler / Kineto Chrome trace-event JSON (``.json``, ``.json.gz``);
- ``ncu``: Nsight Compute CSV (per-kernel metrics, not a timeline).

``profkit.readers.open_trace`` detects the source from the file's content.
"""
