"""Training with the whole iteration (zero_grad, forward, backward, Adam step) captured by hand as one
CUDA graph and replayed every step; the loss is printed every step (.item(): the planted sync).

Truth: one graph captured once, replayed once per step; one sync per step at the planted line.
On CPU (--dry) the same iteration runs eagerly."""

from __future__ import annotations

import torch

import zoo_common as zoo


def main() -> None:
    ap = zoo.parser(__doc__)
    ap.add_argument("--width", type=int, default=2048)
    args = ap.parse_args()
    device = zoo.setup(args)
    width, batch = (64, 8) if args.dry else (args.width, 256)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width))
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, capturable=device.type == "cuda")
    static_x = torch.randn(batch, width, device=device)
    static_y = torch.randn(batch, width, device=device)

    def iteration() -> torch.Tensor:
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(static_x), static_y)
        loss.backward()
        opt.step()
        return loss

    if device.type == "cuda":
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up before capture, as the CUDA graphs docs ask
            for _ in range(3):
                iteration()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = iteration()
        run = graph.replay
    else:
        static_loss = torch.zeros(())

        def run() -> None:
            static_loss.copy_(iteration().detach())
    data = [(torch.randn(batch, width, device=device), torch.randn(batch, width, device=device)) for _ in range(4)]
    with zoo.profiler(args, device) as prof:
        loop = zoo.Steps(args, device, prof)
        for step in loop:
            x, y = data[step % len(data)]
            static_x.copy_(x)
            static_y.copy_(y)
            run()
            zoo.plant_next("sync", ".item()")
            print(f"step {step} loss {static_loss.item():.5f}")
    loop.report()


if __name__ == "__main__":
    main()
