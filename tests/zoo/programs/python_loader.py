"""A training loop whose batches are built in Python, sample by sample (random token lists padded
by hand, then torch.tensor and a copy to the GPU), at the planted "slow" line.

Truth: the host spends most of each step in make_batch (data loading, not framework overhead)
while the GPU idles: the model is small enough that its GPU work (a few ms) is shorter than the
batch building.  ZOO_TRUTH gives make_batch's own median time per step (perf_counter around the
call), the planted line's cost that a host table must show."""

from __future__ import annotations

import json
import random
import statistics
import time

import torch

import zoo_common as zoo


def make_batch(rng: random.Random, batch: int, length: int, vocab: int) -> list[list[int]]:
    rows = []
    for _ in range(batch):
        tokens = [rng.randrange(vocab) for _ in range(rng.randrange(length // 2, length))]
        rows.append(tokens + [0] * (length - len(tokens)))
    return rows


def main() -> None:
    ap = zoo.parser(__doc__)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    device = zoo.setup(args)
    # GPU work of a few ms a step (it was 70 ms at vocab 32000, width 512: GPU-bound, so the batch
    # building overlapped the GPU and was not the step's cause)
    vocab, width, length = (100, 32, 16) if args.dry else (2048, 128, 512)
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, width), torch.nn.Linear(width, vocab)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    rng = random.Random(0)
    batch_ms: list[float] = []
    with zoo.profiler(args, device) as prof:
        loop = zoo.Steps(args, device, prof)
        for _ in loop:
            started = time.perf_counter()
            zoo.plant_next("slow", "make_batch(")
            rows = make_batch(rng, args.batch, length, vocab)
            batch_ms.append(1e3 * (time.perf_counter() - started))
            tokens = torch.tensor(rows, device=device)
            logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad()
    loop.report()
    print("ZOO_TRUTH " + json.dumps({"make_batch_ms_per_step": round(statistics.median(batch_ms), 4)}))


if __name__ == "__main__":
    main()
