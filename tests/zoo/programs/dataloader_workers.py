"""A torch.utils.data.DataLoader with --workers worker processes and pinned memory feeding a
convolutional model; batches are copied with non_blocking=True.

Truth: the workers' time is not the main thread's: with enough workers the loop is GPU-bound and the
main thread's host table holds no per-sample Python (that runs in the workers' processes)."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset

import zoo_common as zoo


class Noise(Dataset):
    """Images made on the fly with a little per-sample work, as a decoder would."""

    def __init__(self, count: int, size: int) -> None:
        self.count, self.size = count, size

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(3, self.size, self.size, generator=generator)
        return (image - image.mean()) / (image.std() + 1e-6), index % 10


def main() -> None:
    ap = zoo.parser(__doc__)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    device = zoo.setup(args)
    size, batch = (16, 4) if args.dry else (128, 64)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(32, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(Noise(batch * (args.steps + 1), size), batch_size=batch, num_workers=args.workers,
                        pin_memory=device.type == "cuda", persistent_workers=args.workers > 0)
    batches = iter(loader)
    with zoo.profiler(args, device) as prof:
        loop = zoo.Steps(args, device, prof)
        for _ in loop:
            images, labels = next(batches)
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            opt.step()
            opt.zero_grad()
    loop.report()


if __name__ == "__main__":
    main()
