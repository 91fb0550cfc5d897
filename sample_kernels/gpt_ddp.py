"""sample_kernels/gpt.py's GPT trained with DistributedDataParallel, one
process per GPU over NCCL.  Start it with torchrun:

  torchrun --nproc_per_node 2 sample_kernels/gpt_ddp.py --steps 12 \\
      --profile torch --trace-out 'rank{rank}.json.gz' [--slow-rank 1]

  --slow-rank R   rank R runs one extra kernel ("spin_kernel", --slow-ms long)
                  per step before its backward pass, so the other ranks wait
                  for it in the gradient all-reduce;
  --trace-out     "{rank}" is replaced by the process's rank;
  the other flags are gpt.py's.

NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and friends are set here if the
caller has not set them): on a shared host it can take the GPUs out of service."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

for _name, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                      ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_name, _value)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sample_kernels.gpt import add_model_args, build, train  # noqa: E402

# torch.cuda._sleep counts GPU clock cycles: ~1.98 GHz on the H100/H200
CYCLES_PER_MS = 1_980_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(parser)
    parser.add_argument("--slow-rank", type=int, default=-1, help="this rank does extra GPU work every step")
    # the default is well above this model's ~10 ms step, so the waiting rank is unambiguous
    parser.add_argument("--slow-ms", type=float, default=30.0, help="length of the slow rank's extra kernel")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank = dist.get_rank()
    args.trace_out = args.trace_out.format(rank=rank)

    model, optimizer, x, y = build(args)
    ddp_model = DistributedDataParallel(model, device_ids=[local_rank])

    def slow_down(step: int) -> None:
        torch.cuda._sleep(int(args.slow_ms * CYCLES_PER_MS))

    losses = train(args, ddp_model, optimizer, x, y, extra_work=slow_down if rank == args.slow_rank else None)
    if rank == 0 and not args.print_loss:
        print("losses:", " ".join(f"{v:.4f}" for v in losses))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
