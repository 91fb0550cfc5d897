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

import multiprocessing
import os
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any, Iterator

from profkit.errors import ProfkitError
from profkit.signals import Stopped
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
    stopping = False
    try:
        yield client
    except (KeyboardInterrupt, Stopped):
        stopping = True
        raise
    finally:
        if stopping:
            # A signal interrupted the main thread, maybe inside the cluster's own calls: a
            # graceful close can then wait forever on its event loop (seen: SIGTERM during
            # ``ranks`` under load hung in Cluster.close()).  The process is about to exit; its
            # worker threads go with it, and worker processes are ended here.
            for child in multiprocessing.active_children():
                child.terminate()
        else:
            client.close()
            cluster.close()


def map_ranks(task: Callable[[RankInput], dict[str, Any]], inputs: Sequence[RankInput], *,
              scheduler: str | None = None, workers: int | None = None,
              on_done: Callable[[RankInput, dict[str, Any], int], None] | None = None) -> list[dict[str, Any]]:
    """``task(input)`` for every input on Dask; results in input order.

    ``task`` must return a plain dict and never raise for a bad file (it
    returns ``{"error": ...}``); a task that dies anyway (a worker killed, say)
    becomes such an error row here, so one bad rank never stops the others.

    A file that turns out to hold a whole job answers ``{"job_ranks": [...]}``
    instead of a summary (``per_rank.summarize_rank``): each of its ranks is
    then a task of its own, ``(path, rank)``, and their summaries take the
    file's place, in rank order.  A local cluster grows to one worker per core
    for them (it was sized by the number of files).  ``on_done`` gets each
    finished rank and the number of ranks known so far."""
    from distributed import as_completed

    slots: list[list[dict[str, Any] | None]] = [[None] for _ in inputs]
    total = len(inputs)
    with dask_client(scheduler, len(inputs), workers) as client:
        futures = client.map(task, list(inputs), pure=False)
        where = {f.key: (i, 0, inputs[i]) for i, f in enumerate(futures)}
        pending = as_completed(futures, loop=client.loop)
        for future in pending:
            i, j, inp = where.pop(future.key)
            try:
                result = future.result()
            except Exception as exc:  # the worker died or the task could not run: report it per rank
                result = {"file": str(inp.path), "rank": inp.job_rank if inp.job_rank is not None else inp.rank_hint,
                          "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
            ranks = result.get("job_ranks") if inp.job_rank is None else None
            if ranks:
                slots[i] = [None] * len(ranks)
                total += len(ranks) - 1
                _grow(client, scheduler, workers, total)
                more = [RankInput(inp.path, inp.rank_hint, job_rank=r, hint_source=inp.hint_source) for r in ranks]
                for k, f in enumerate(client.map(task, more, pure=False)):
                    where[f.key] = (i, k, more[k])
                    pending.add(f)
                continue
            slots[i][j] = result
            if on_done is not None:
                on_done(inp, result, total)
    return [r for slot in slots for r in slot if r is not None]


def _grow(client: Any, scheduler: str | None, workers: int | None, total: int) -> None:
    """One local worker per core, at most one per rank, once a whole-job file adds ranks."""
    if workers is None and (scheduler is None or "://" not in scheduler):
        cluster = getattr(client, "cluster", None)
        if cluster is not None and len(cluster.workers) < default_workers(total):
            cluster.scale(default_workers(total))
