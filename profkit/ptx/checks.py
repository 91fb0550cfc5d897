"""Checks for code review and CI: ``--check vectorized-loads --max-registers 64 --no-spills``."""

from __future__ import annotations

from dataclasses import dataclass

from profkit.ptx.summary import VECTOR_BITS, KernelSummary, memory_verdict

CHECKS = ("vectorized-loads", "vectorized-stores", "no-spills", "no-local-memory")


@dataclass(frozen=True)
class CheckResult:
    kernel: str
    arch: str
    check: str
    passed: bool
    detail: str

    def line(self) -> str:
        status = "ok" if self.passed else "FAILED"
        return f"{self.kernel} [{self.arch}] {self.check}: {status}: {self.detail}"


def run_checks(summary: KernelSummary, checks: tuple[str, ...] = (), max_registers: int | None = None,
               max_shared_bytes: int | None = None) -> list[CheckResult]:
    """Evaluate the named checks and limits on one kernel's summary."""
    results = []

    def result(check: str, passed: bool, detail: str) -> None:
        results.append(CheckResult(summary.kernel, summary.arch, check, passed, detail))

    for check in dict.fromkeys(checks):  # each once, in the order given
        if check in ("vectorized-loads", "vectorized-stores"):
            counts = summary.mix.global_loads if check == "vectorized-loads" else summary.mix.global_stores
            noun = "global load" if check == "vectorized-loads" else "global store"
            narrow = sum(n for w, n in counts.items() if w < VECTOR_BITS)
            result(check, narrow == 0, f"{memory_verdict(counts, noun)} ({summary.listing})")
        elif check == "no-spills":
            if summary.spills is None:
                result(check, False, f"cannot tell: no ptxas -v log for this cubin and it has a "
                                     f"{summary.stack_bytes}-byte stack frame")
            else:
                result(check, not summary.spills, f"{summary.spill_stores_bytes} bytes spill stores, "
                                                  f"{summary.spill_loads_bytes} bytes spill loads")
        elif check == "no-local-memory":
            result(check, summary.local_bytes == 0, f"{summary.local_bytes} bytes of local memory per thread")
        else:
            raise ValueError(f"unknown check {check!r}")
    if max_registers is not None:
        result(f"max-registers {max_registers}", summary.registers <= max_registers,
               f"{summary.registers} registers per thread")
    if max_shared_bytes is not None:
        result(f"max-shared {max_shared_bytes}", summary.shared_bytes <= max_shared_bytes,
               f"{summary.shared_bytes} bytes of shared memory per block")
    return results
