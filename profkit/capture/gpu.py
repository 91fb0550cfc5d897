"""Is there an NVIDIA GPU here, and which?  (device nodes and nvidia-smi)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class GpuStatus:
    """What the machine says about its GPUs."""

    devices: list[str] = field(default_factory=list)  # /dev/nvidia0 ...
    smi: str | None = None  # path of nvidia-smi
    gpus: list[dict[str, str]] = field(default_factory=list)  # name, driver_version, memory_total, compute_cap
    cuda_version: str | None = None  # the driver's CUDA version (nvidia-smi header)
    error: str | None = None  # why nvidia-smi failed

    @property
    def available(self) -> bool:
        return bool(self.devices) and (self.smi is None or bool(self.gpus))

    def problem(self) -> str | None:
        """One line saying why there is no usable GPU, or None."""
        if not self.devices:
            smi = "nvidia-smi not found" if self.smi is None else "nvidia-smi found"
            return f"no NVIDIA GPU: no /dev/nvidia[0-9]* device and {smi}"
        if self.smi is not None and not self.gpus:
            return f"no NVIDIA GPU usable: nvidia-smi failed ({self.error or 'no GPUs listed'})"
        return None


QUERY_FIELDS = ("name", "driver_version", "memory.total", "compute_cap")


def detect_gpus(dev_dir: Path = Path("/dev"), env: Mapping[str, str] | None = None,
                timeout: float = 20.0) -> GpuStatus:
    """Device nodes plus nvidia-smi's view (GPU names, driver, CUDA version)."""
    env = os.environ if env is None else env
    status = GpuStatus(devices=sorted(str(p) for p in dev_dir.glob("nvidia[0-9]*")))
    smi = shutil.which("nvidia-smi", path=env.get("PATH", ""))
    status.smi = smi
    if smi is None:
        return status
    try:
        query = subprocess.run([smi, f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=timeout, check=False)
        header = subprocess.run([smi], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        status.error = str(exc)
        return status
    if query.returncode != 0:
        # old drivers lack compute_cap: ask again without it
        retry = subprocess.run([smi, f"--query-gpu={','.join(QUERY_FIELDS[:3])}", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=timeout, check=False)
        if retry.returncode != 0:
            said = (query.stdout + query.stderr).strip().splitlines()
            status.error = said[-1] if said else f"exit status {query.returncode}"
            return status
        query = retry
    status.gpus = parse_smi_query(query.stdout)
    status.cuda_version = parse_cuda_version(header.stdout)
    return status


def parse_smi_query(text: str) -> list[dict[str, str]]:
    keys = ("name", "driver_version", "memory_total_mib", "compute_cap")
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [v.strip() for v in line.split(",")]
        gpus.append(dict(zip(keys, values)))
    return gpus


def parse_cuda_version(text: str) -> str | None:
    """"CUDA Version: 13.0" from nvidia-smi's header."""
    match = re.search(r"CUDA Version:\s*([\d.]+)", text)
    return match.group(1) if match else None
