"""Many ranks of one job: read each rank's trace on a Dask worker, reduce across ranks.

- ``inputs``: which files are ranks, and which rank each one is;
- ``per_rank``: what a worker computes from one trace (a small dict: only
  summaries travel back, never a trace);
- ``engine``: runs ``per_rank.summarize_rank`` over the inputs on Dask (a local
  cluster by default, or ``tcp://HOST:PORT``), with progress per rank;
- ``profkit.analysis.ranks.cross_rank``: the cross-rank reduction (straggler, collectives,
  skew), plain data in and out.
"""
