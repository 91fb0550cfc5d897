"""A training loop whose batches are built in Python, sample by sample (random token lists padded
by hand, then torch.tensor and a copy to the GPU), at the planted "slow" line.

Truth: the host spends most of each step in make_batch (data loading, not framework overhead)
while the GPU idles."""

from __future__ import annotations

import random

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
    vocab, width, length = (100, 32, 16) if args.dry else (32000, 512, 512)
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, width), torch.nn.Linear(width, vocab)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    rng = random.Random(0)
    with zoo.profiler(args, device) as prof:
        loop = zoo.Steps(args, device, prof)
        for _ in loop:
            zoo.plant_next("slow", "make_batch(")
            rows = make_batch(rng, args.batch, length, vocab)
            tokens = torch.tensor(rows, device=device)
            logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad()
    loop.report()


if __name__ == "__main__":
    main()
