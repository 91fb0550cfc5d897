"""Every NVTX flavour the readers must handle, around small elementwise kernels.

Push/pop ranges in the default and a named domain, start/end ranges (one of
them ending on another thread), marks, a registered string, and texts with
markup characters.  No cuBLAS, so Nsight Systems 2023.4 can trace it on a
CUDA 13 host.  Default-domain events go through torch.cuda.nvtx (NVTX v2,
which 2023.4 records); the named domain through the nvtx package with
profkit's workaround for 2023.4's nvtxDomainIsEnabled answer.

Run: nsys profile -t cuda,nvtx,osrt --export sqlite python scripts/nvtx_probe.py
"""

import sys
import threading
from pathlib import Path

import nvtx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from profkit.capture.sync_hook import nvtx_domain  # noqa: E402

x = torch.randn(1 << 20, device="cuda")
domain = nvtx_domain("probe")

for step in range(4):
    torch.cuda.nvtx.range_push(f"step {step}")                    # default domain push/pop
    y = x * 2.0
    domain.push_range(domain.get_event_attributes(message="inner"))  # named domain, registered string
    y = torch.tanh(y) + 1.0
    torch.cuda.nvtx.mark("checkpoint")                            # mark: no end
    domain.pop_range()
    handle = torch.cuda.nvtx.range_start("async<work>")           # start/end range
    y = y.exp()
    torch.cuda.nvtx.range_end(handle)
    with nvtx.annotate("plain nvtx package"):                     # what most users write
        y = y.sqrt()
    torch.cuda.nvtx.range_pop()

# A start/end range that starts on one thread and ends on another.
cross = torch.cuda.nvtx.range_start("cross-thread")
worker = threading.Thread(target=lambda: (torch.relu(x), torch.cuda.nvtx.range_end(cross)))
worker.start()
worker.join()
torch.cuda.nvtx.range_push("<script>alert(1)</script>")
z = x + 1
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
print("ok", float(z[0]))
