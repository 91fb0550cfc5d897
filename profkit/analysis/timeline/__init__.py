"""Timeline: when was the GPU busy, what ran under which range, which call launched what?

- ``intervals``: the one interval algebra of profkit (union, intersection, difference,
  complement within windows, time covered per window), vectorized over numpy columns;
- ``busy``: GPU busy time per stream and time bin, per device as a union, its idle gaps
  (``stream_busy``, ``gpu_busy_segments``, ``gpu_utilization``, ``gpu_busy``);
- ``ranges``: annotated CPU ranges named as nsys names them (``cpu_ranges``, ``nvtx_bars``);
- ``nvtx_projection``: which ranges each kernel ran under (``kernel_range_pairs``);
- ``launch_calls``: each GPU operation's launching call, joined on (pid, correlation id)
  (``launch_calls``, ``KeyIndex``);
- ``capture``: what was traced, on what, and how busy the GPU was (``capture_info``).
"""
