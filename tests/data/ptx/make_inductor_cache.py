"""Run on the GPU host (needs torch + a GPU): writes inductor_cache.tar.xz next to
this file, a real TORCHINDUCTOR_CACHE_DIR left by torch.compile, for
tests/test_ptx_cli.py::test_real_inductor_cache.

Only the files `profkit ptx --inductor` reads are kept (.ptx, .cubin, Triton's
.json metadata and the generated .py modules), so the archive stays small.

    python tests/data/ptx/make_inductor_cache.py
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent / "inductor_cache.tar.xz"
KEEP = {".ptx", ".cubin", ".json", ".py"}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="inductor-") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # before torch is imported
        os.environ.pop("TRITON_CACHE_DIR", None)  # inductor then uses <cache>/triton/<device>
        import torch

        def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            # a pointwise GELU, a reduction (softmax) and a matmul epilogue
            return torch.nn.functional.gelu(x @ w, approximate="tanh").softmax(dim=-1) * 2.0

        x = torch.randn(4096, 1024, device="cuda")
        w = torch.randn(1024, 1024, device="cuda")
        torch.compile(block)(x, w)
        torch.cuda.synchronize()
        files = [p for p in sorted(Path(cache).rglob("*"))
                 if p.is_file() and p.suffix in KEEP and p.stat().st_size < 4_000_000]
        with tarfile.open(OUT, "w:xz") as tar:
            for path in files:
                tar.add(path, arcname=str(path.relative_to(cache)))
        print(f"wrote {OUT} ({len(files)} files, torch {torch.__version__}, "
              f"{torch.cuda.get_device_name()})")


if __name__ == "__main__":
    main()
