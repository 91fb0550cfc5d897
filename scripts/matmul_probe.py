"""cuBLAS/CUTLASS GEMMs of several shapes and dtypes: kernels with large
dynamic shared memory and cluster launches, for the ncu occupancy fixtures."""

import torch

shapes = [(128, 128, 128), (1024, 1024, 1024), (4096, 4096, 4096), (8192, 1024, 4096), (77, 3000, 1024)]
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        (a @ b).sum().item()
torch.cuda.synchronize()
