"""Run a per-rank function over many traces on Dask.

Each rank's file is read and reduced on a worker (``per_rank.summarize_rank``);
only the small per-rank summary travels back to this process.  A worker runs
one task at a time (one thread), so its memory is bounded by one rank's file.

Schedulers:
- ``None`` (default): a local ``dask.distributed`` cluster of threads, one per
  core (at most one per rank).  Measured with benchmarks/ranks_scale.py (64
  real-sized ranks, 2 cores): threads 17.6 s, worker processes 33.6 s (1, 2 or
  4 of them).  Reading a rank releases the GIL for most of its time (SQLite
  queries, msgspec decoding, numpy), while each worker process pays seconds of
  start-up importing pandas and profkit; processes only pay off for ranks of
  hundreds of MB on many cores, so they are an option, not the default.
- ``"threads"`` / ``"processes"``: force one local mode.
- ``"tcp://HOST:PORT"``: an existing ``dask.distributed`` scheduler; its workers
  must be able to import profkit and read the files at the same paths.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any, Iterator

from profkit.errors import ProfkitError
from profkit.ranks.inputs import RankInput

CONNECT_TIMEOUT_S = 10


def default_workers(n_inputs: int) -> int:
    return max(1, min(n_inputs, os.cpu_count() or 1))


@contextmanager
def dask_client(scheduler: str | None, n_inputs: int, workers: int | None = None) -> Iterator[Any]:
    """A ``distributed.Client`` for the chosen scheduler, closed afterwards."""
    import logging

    from distributed import Client, LocalCluster

    # distributed logs worker start/stop at INFO and tracebacks of lost
    # connections at WARNING; profkit reports failures itself, one line each.
    logging.getLogger("distributed").setLevel(logging.ERROR)
    if scheduler and "://" in scheduler:
        try:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise ProfkitError(f"cannot reach the Dask scheduler at {scheduler} ({type(exc).__name__})") from None
        try:
            yield client
        finally:
            client.close()
        return
    if scheduler not in (None, "threads", "processes"):
        raise ProfkitError(f"--scheduler {scheduler!r}: use threads, processes or tcp://HOST:PORT")
    n = workers or default_workers(n_inputs)
    processes = scheduler == "processes"
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=processes, dashboard_address=None,
                           silence_logs=logging.ERROR)
    client = Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def map_ranks(task: Callable[[RankInput], dict[str, Any]], inputs: Sequence[RankInput], *,
              scheduler: str | None = None, workers: int | None = None,
              on_done: Callable[[RankInput, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """``task(input)`` for every input on Dask; results in input order.

    ``task`` must return a plain dict and never raise for a bad file (it
    returns ``{"error": ...}``); a task that dies anyway (a worker killed, say)
    becomes such an error row here, so one bad rank never stops the others."""
    from distributed import as_completed

    results: list[dict[str, Any] | None] = [None] * len(inputs)
    with dask_client(scheduler, len(inputs), workers) as client:
        futures = client.map(task, list(inputs), pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        for future in as_completed(futures, loop=client.loop):
            i = index[future.key]
            try:
                result = future.result()
            except Exception as exc:  # the worker died or the task could not run: report it per rank
                result = {"file": str(inputs[i].path), "rank": inputs[i].rank_hint,
                          "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
            results[i] = result
            if on_done is not None:
                on_done(inputs[i], result)
    return [r for r in results if r is not None]
