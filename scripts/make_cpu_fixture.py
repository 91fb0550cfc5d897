"""Make tests/data/cpu/: a real CPU-only torch.profiler trace of a small training loop.

A CPU machine's trace (no CUDA activity): an MLP trained for 9 optimizer steps
under ``torch.profiler.profile(activities=[CPU], with_stack=True, schedule=schedule(wait=1,
warmup=2, active=6))`` with ``prof.step()`` after each, so the trace holds six
``ProfilerStep#N`` ranges; each step builds its batch in pure Python
(``make_batch``) before forward, backward and the optimizer step.

    python scripts/make_cpu_fixture.py tests/data/cpu/cpu_train.json.gz
"""

from __future__ import annotations

import gzip
import random
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule


def make_batch(rows: int, width: int, seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    return [[rng.random() for _ in range(width)] for _ in range(rows)]


def main(out: Path) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    tmp = Path(tempfile.mkdtemp())
    raw = tmp / "trace.json"
    with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                 schedule=schedule(wait=1, warmup=2, active=6, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
        for step in range(9):
            x = torch.tensor(make_batch(32, 64, step))
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            prof.step()
    with open(raw, "rb") as src, open(out, "wb") as fh, \
            gzip.GzipFile(filename="", mode="wb", fileobj=fh, compresslevel=9, mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/cpu/cpu_train.json.gz"))
