"""sample_kernels/gpt.py's GPT trained under torch.profiler(profile_memory=True), with a planted
leak on request: the memory fixtures' program (tests/data/memory, scripts/make_memory_fixtures.sh).

  --leak   keep one activation tensor per step in a list that is never cleared (a classic leak:
           a list of losses or hidden states kept "for logging")

Prints MEM_TRUTH, a JSON line of what the program knows for certain, from the model and the
optimizer themselves (never from a profiler): the parameters' bytes, the optimizer state's bytes
after the first step, the leaked tensor's bytes per step and the file:line that keeps it.
Runs on the GPU when there is one, else on the CPU (the host allocator's events).

Run: python sample_kernels/gpt_memory.py --steps 8 --leak --trace-out memory_leak.json.gz
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sample_kernels.gpt import GPT  # noqa: E402
from sample_kernels.profiling import device  # noqa: E402

WAIT, WARMUP = 1, 1  # steps before the profiler records: the optimizer's state exists by then


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8, help="steps recorded (after 2 unrecorded ones)")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--leak", action="store_true", help="keep one activation per step, forever")
    parser.add_argument("--trace-out", required=True, help="the Kineto trace (.json or .json.gz)")
    args = parser.parse_args()

    torch.manual_seed(0)
    dev = device()
    vocab = 512
    model = GPT(vocab, args.seq, args.dim, args.layers, 4).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    tokens = torch.randint(vocab, (args.batch, args.seq + 1), device=dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    kept: list[torch.Tensor] = []
    leak_line = None
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    total = WAIT + WARMUP + args.steps
    with profile(activities=activities, profile_memory=True, with_stack=True,
                 schedule=schedule(wait=WAIT, warmup=WARMUP, active=args.steps),
                 on_trace_ready=lambda p: p.export_chrome_trace(args.trace_out)) as prof:
        for step in range(total):
            with record_function("train_step"):
                optimizer.zero_grad(set_to_none=True)
                loss = model(x, y)
                if args.leak:
                    leak_line = inspect.currentframe().f_lineno + 1
                    kept.append(torch.empty(args.batch, args.seq, args.dim, device=dev))
                loss.backward()
                optimizer.step()
            prof.step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    truth = {
        "device": str(dev),
        "steps_recorded": args.steps,
        "parameter_bytes": tensor_bytes(model.parameters()),
        "optimizer_state_bytes": tensor_bytes(state),
        "leak_bytes_per_step": args.batch * args.seq * args.dim * 4 if args.leak else 0,
        "leak_site": f"{Path(__file__).name}:{leak_line}" if args.leak else None,
        "leak_function": "main" if args.leak else None,
    }
    print("MEM_TRUTH " + json.dumps(truth))


if __name__ == "__main__":
    main()
