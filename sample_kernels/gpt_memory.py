"""sample_kernels/gpt.py's GPT trained under torch.profiler(profile_memory=True), with a planted
leak on request: the memory fixtures' program (tests/data/memory, scripts/make_memory_fixtures.sh).

  --leak      keep one activation tensor per step in a list that is never cleared (a classic leak:
              a list of losses or hidden states kept "for logging")
  --snapshot  record the CUDA caching allocator's history (_record_memory_history) and dump it
              to this pickle at the end (or, with --oom, from an out-of-memory observer)
  --oom       (CUDA) the sequence length doubles every step, with attention on PyTorch's math
              path (a seq x seq score matrix per head), until an allocation fails

Prints MEM_TRUTH, a JSON line of what the program knows for certain, from the model, the optimizer
and the allocator's own counters (never from a profiler): the parameters' bytes, the optimizer
state's bytes after the first step, the leaked tensor's bytes per step and the file:line that
keeps it; on CUDA each recorded step's peak allocated and reserved bytes
(torch.cuda.max_memory_allocated/reserved, reset as the step starts) and the allocated bytes at its
end; with --oom the failed request's bytes as the allocator's OOM observer was told them, the step
and sequence length it failed at, and the line that made the request.

Runs on the GPU when there is one, else on the CPU (the host allocator's events).

Run: python sample_kernels/gpt_memory.py --steps 8 --leak --trace-out memory_leak.json.gz
     python sample_kernels/gpt_memory.py --oom --snapshot oom.pickle
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import sys
import traceback
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sample_kernels.gpt import GPT  # noqa: E402
from sample_kernels.profiling import device  # noqa: E402

WAIT, WARMUP = 1, 1  # steps before the profiler records: the optimizer's state exists by then
HISTORY_ENTRIES = 200_000  # the allocator history's ring: enough for every event of these runs
OOM_MAX_SEQ = 1 << 17  # the position table's length in --oom runs; a 80-141 GB GPU fails long before


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class _NoProfiler:
    def step(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8, help="steps recorded (after 2 unrecorded ones)")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--leak", action="store_true", help="keep one activation per step, forever")
    parser.add_argument("--trace-out", help="the Kineto trace (.json or .json.gz), profile_memory=True")
    parser.add_argument("--snapshot", help="CUDA: record the allocator's history and dump it to this pickle")
    parser.add_argument("--oom", action="store_true", help="CUDA: double the sequence length until out of memory")
    args = parser.parse_args()

    torch.manual_seed(0)
    dev = device()
    cuda = dev.type == "cuda"
    if args.snapshot and cuda:
        torch.cuda.memory._record_memory_history(max_entries=HISTORY_ENTRIES)
    if args.oom:
        if not cuda:
            raise SystemExit("--oom needs a CUDA device")
        print("MEM_TRUTH " + json.dumps(run_until_oom(args, dev)))
        return
    vocab = 512
    model = GPT(vocab, args.seq, args.dim, args.layers, 4).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    tokens = torch.randint(vocab, (args.batch, args.seq + 1), device=dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    kept: list[torch.Tensor] = []
    leak_line = None
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    total = WAIT + WARMUP + args.steps
    # the allocator's own per-step figures, for the recorded steps
    peaks: dict[str, list[int]] = {"peak_allocated": [], "peak_reserved": [], "allocated_at_end": []}
    profiler = (profile(activities=activities, profile_memory=True, with_stack=True,
                        schedule=schedule(wait=WAIT, warmup=WARMUP, active=args.steps),
                        on_trace_ready=lambda p: p.export_chrome_trace(args.trace_out))
                if args.trace_out else contextlib.nullcontext(_NoProfiler()))
    with profiler as prof:
        for step in range(total):
            if cuda:
                torch.cuda.reset_peak_memory_stats(dev)
            with record_function("train_step"):
                optimizer.zero_grad(set_to_none=True)
                loss = model(x, y)
                if args.leak:
                    leak_line = inspect.currentframe().f_lineno + 1
                    kept.append(torch.empty(args.batch, args.seq, args.dim, device=dev))
                loss.backward()
                optimizer.step()
            if cuda and step >= WAIT + WARMUP:
                peaks["peak_allocated"].append(torch.cuda.max_memory_allocated(dev))
                peaks["peak_reserved"].append(torch.cuda.max_memory_reserved(dev))
                peaks["allocated_at_end"].append(torch.cuda.memory_allocated(dev))
            prof.step()
    if cuda:
        torch.cuda.synchronize()
    if args.snapshot and cuda:
        torch.cuda.memory._dump_snapshot(args.snapshot)
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
    if cuda:
        truth.update({f"step_{k}_bytes": v for k, v in peaks.items()})
        truth["device_total_bytes"] = torch.cuda.get_device_properties(dev).total_memory
    print("MEM_TRUTH " + json.dumps(truth))


def run_until_oom(args: argparse.Namespace, dev: torch.device) -> dict:
    """Train with the sequence length doubled every step until the allocator fails; what failed."""
    # the math path keeps a (batch, heads, seq, seq) score matrix: memory grows with seq squared
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.backends.cuda.enable_cudnn_sdp(False)
    vocab = 512
    model = GPT(vocab, OOM_MAX_SEQ, args.dim, args.layers, 4).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    failed: dict = {}

    def observer(device: int, requested: int, device_allocated: int, device_free: int) -> None:
        failed.update(requested_bytes=requested, device_allocated_bytes=device_allocated,
                      device_free_bytes=device_free)
        if args.snapshot:
            torch.cuda.memory._dump_snapshot(args.snapshot)

    torch._C._cuda_attach_out_of_memory_observer(observer)
    step, seq = 0, args.seq
    try:
        while seq <= OOM_MAX_SEQ:
            tokens = torch.randint(vocab, (args.batch, seq + 1), device=dev)
            optimizer.zero_grad(set_to_none=True)
            loss = model(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
            loss.backward()
            optimizer.step()
            step, seq = step + 1, seq * 2
    except torch.OutOfMemoryError as error:
        frame = traceback.extract_tb(error.__traceback__)[-1]  # the innermost Python line: the request's
        return {"device": str(dev), "oom": {**failed, "step": step, "seq": seq,
                                            "site": f"{Path(frame.filename).name}:{frame.lineno}",
                                            "function": frame.name},
                "device_total_bytes": torch.cuda.get_device_properties(dev).total_memory}
    return {"device": str(dev), "oom": None}


if __name__ == "__main__":
    main()
