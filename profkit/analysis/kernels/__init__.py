"""Kernels: which kernels ran, for how long, whose code are they, and what machine code ran?

Entries: ``summaries.kernel_summary(trace)`` (and ``api_summary``, ``nvtx_summary``,
``memory_summary``, ``nvtx_kernel_summary``: ``nsys stats``'s tables to the nanosecond),
``graphs.cuda_graphs(trace)``, ``code.code_by_kernel`` / ``targets.code_for_trace`` (machine
code of the kernels), ``bandwidth.attach_bandwidth`` (achieved DRAM bandwidth from ncu).

- ``names``: one spelling of a kernel name whichever tool demangled it;
- ``origin``: what kind of work a kernel does (HTA's kernel types) and whose code it is;
- ``grouped_stats``: grouped duration statistics equal to nsys's;
- ``summaries``, ``graphs``, ``code``, ``targets``, ``bandwidth``: as above.
"""
