"""Every NVTX flavour the readers must handle, around small elementwise kernels.

Push/pop ranges in the default and a named domain, start/end ranges (one of
them crossing threads), marks, registered strings, torch.cuda.nvtx ranges and
a range text with markup characters.  No cuBLAS, so Nsight Systems 2023.4 can
trace it on a CUDA 13 host.

Run: nsys profile -t cuda,nvtx,osrt --export sqlite python scripts/nvtx_probe.py
"""

import threading

import nvtx
import torch

x = torch.randn(1 << 20, device="cuda")
domain = nvtx.get_domain("probe")
registered = domain.get_registered_string("registered/range")

for step in range(4):
    nvtx.push_range(f"step {step}")                     # default domain push/pop
    y = x * 2.0
    with nvtx.annotate("inner", domain="probe"):        # named domain push/pop
        y = torch.tanh(y) + 1.0
        nvtx.mark("checkpoint", domain="probe")         # mark (no end)
    handle = nvtx.start_range("async<work>")            # start/end range
    y = y.exp()
    nvtx.end_range(handle)
    domain.push_range(domain.get_event_attributes(message=registered))
    y = y * y
    domain.pop_range()
    torch.cuda.nvtx.range_push("torch.range")            # libnvToolsExt via torch
    y = y.sqrt()
    torch.cuda.nvtx.range_pop()
    nvtx.pop_range()

# A start/end range that starts on one thread and ends on another.
cross = nvtx.start_range("cross-thread")
worker = threading.Thread(target=lambda: (torch.relu(x), nvtx.end_range(cross)))
worker.start()
worker.join()
with nvtx.annotate("<script>alert(1)</script>"):
    z = x + 1
torch.cuda.synchronize()
print("ok", float(z[0]))
