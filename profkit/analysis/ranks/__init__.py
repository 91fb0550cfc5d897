"""Ranks: which rank straggles, and what did the collectives move?

Entry: ``cross_rank.cross_rank(summaries)`` over the per-rank summaries that
``profkit.ranks.per_rank`` maps over the ranks (on Dask, outside this package).

- ``collectives``: each NCCL kernel's message size and bandwidth, one rank's calls;
- ``cross_rank``: one row per rank, the straggler, collective skew, kernels that differ;
- ``culprit``: the straggler (``straggler(summaries)``) and the kernel or line that makes it late.
"""

from profkit.analysis.ranks.culprit import straggler

__all__ = ["straggler"]
