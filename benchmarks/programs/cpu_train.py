"""A CPU training loop for the capture-overhead benchmark and tests (no GPU, no download).

    python benchmarks/programs/cpu_train.py --steps 8                   # an MLP, torch-bound steps
    python benchmarks/programs/cpu_train.py --steps 30 --python-batches  # batches built in pure Python

Each step builds a batch (``make_batch``: torch.randn, or with --python-batches nested
Python lists of random numbers, the shape of a hand-written data pipeline), then runs
forward, backward and an SGD step.  Prints the mean step time, after the first step.
"""

from __future__ import annotations

import argparse
import random
import time

import torch


def make_batch(rows: int, width: int, rng: random.Random, python: bool) -> torch.Tensor:
    if not python:
        return torch.randn(rows, width)
    return torch.tensor([[rng.random() for _ in range(width)] for _ in range(rows)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--python-batches", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    rng = random.Random(0)
    model = torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
                                torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
                                torch.nn.Linear(args.width, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        batch = make_batch(args.rows, args.width, rng, args.python_batches)
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    later = times[1:] or times
    print(f"steps {args.steps} mean_step_s {sum(later) / len(later):.4f}")


if __name__ == "__main__":
    main()
