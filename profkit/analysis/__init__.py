"""The analyses: functions of a ``Trace`` (``profkit.model``) that return plain data.

One subpackage per question; each ``__init__`` names its entry function.

- ``steps``: what is one iteration, its phases (``find_steps``)
- ``breakdown``: where does the GPU time go, with HTA's definitions (``rank_breakdown``)
- ``host``: where does the CPU time go while the GPU waits (``host_time``)
- ``sync``: which lines synchronize, and what it costs (``stalls.analyze_stalls``)
- ``kernels``: which kernels ran, how long, whose code, what machine code (``summaries``, ``graphs``)
- ``occupancy``: theoretical occupancy and its limiter (``trace_occupancy``)
- ``roofline``: which roof bounds each profiled kernel (``roofline``)
- ``timeline``: when was the GPU busy: one interval algebra, time bins, ranges, the launch<->kernel join
- ``compare``: did a change make the run slower, or is it noise (``diff.diff_traces``)
- ``ranks``: which rank straggles, what the collectives moved (``cross_rank.cross_rank``)

An analysis imports ``profkit.model`` and other analyses, never a reader, ``capture`` or a
renderer (tests/test_import_layers.py checks).
"""
