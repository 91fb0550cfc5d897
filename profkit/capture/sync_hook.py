"""Record where in Python each synchronizing call was made.

`profkit trace --python-sync-sites` launches the user's script through
profkit.capture.launch, which calls ``install()`` before the script runs.
Every call that can block the CPU on the GPU (``Tensor.item``, ``.cpu()``,
``.tolist()``, printing or formatting a tensor, tensor truthiness,
``torch.cuda.synchronize`` ...) is wrapped in an NVTX push/pop range whose
text names the cause and the user's ``file:line``.  The CUDA API call that
actually synchronizes (cudaStreamSynchronize, cudaMemcpyAsync ...) then lies
inside that range on the same thread, which is how the stall analysis joins
the two.  nsys's own ``--python-backtrace`` gives no Python frames on our
GPU host (callchainId stays NULL), so this is the attribution that works.

Range text:  ``profkit.sync|<kind>|<file>:<line>|<source line>`` (``profkit.model.sync_sites``)

Under ``profkit trace --backend torch`` (PROFKIT_SYNC_RANGES=record_function)
the same text goes into a ``record_function`` range instead, which
torch.profiler records as a ``user_annotation`` event on the same thread as
the runtime call it encloses.

Cost: calls on CPU tensors take only the fast path (a thread-local read and
an ``is_cuda`` check); calls on CUDA tensors also walk the stack to the
user's frame and push/pop one NVTX range.  The range text and its NVTX
attributes are cached per call site, so a site seen before costs no string
work.  benchmarks/sync_hook_overhead.py measures both paths.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import linecache
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

# the range text and kind names, shared with the readers and the analysis that read the ranges back
from profkit.model.sync_sites import (
    CPU,
    DOMAIN,
    FORMAT,
    ITEM,
    SYNCHRONIZE,
    TOLIST,
    TRUTH,
    encode_site,
)

# "record_function": torch.profiler ranges instead of NVTX (the torch backend sets it)
RANGES_ENV = "PROFKIT_SYNC_RANGES"
RECORD_FUNCTION = "record_function"

# (owner attribute path, attribute, kind) of the Tensor methods wrapped
TENSOR_METHODS = (
    ("item", ITEM), ("tolist", TOLIST), ("cpu", CPU),
    ("__repr__", FORMAT), ("__format__", FORMAT),
    ("__bool__", TRUTH), ("__int__", ITEM), ("__float__", ITEM), ("__index__", ITEM),
)

class _State(threading.local):
    # a class default: reading a missing attribute of a threading.local
    # raises inside getattr, which costs ~400 ns on every wrapped call
    active = False
    record: Any = None  # the open record_function range (torch backend)


_state = _State()
_installed: list[tuple[Any, str, Any]] = []  # (owner, attribute, original) to undo install()
_SKIP_DIRS: tuple[str, ...] = ()
_site_cache: dict[tuple[str, str, int], Any] = {}
_MISSING = object()


def _user_frame(depth: int = 4):
    """The innermost frame outside torch, this package and the launcher.

    depth 4 skips _user_frame, _push, in_range and the wrapper itself.
    """
    frame = sys._getframe(depth)
    while frame is not None and frame.f_code.co_filename.startswith(_SKIP_DIRS):
        frame = frame.f_back
    return frame


def _site_label(filename: str) -> str:
    """Relative to the working folder when the file is under it, else absolute."""
    if filename.startswith("<"):
        return filename
    try:
        relative = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if relative.startswith(os.pardir + os.sep) else relative


def _push(kind: str) -> bool:
    frame = _user_frame()
    if frame is None:
        return False
    key = (kind, frame.f_code.co_filename, frame.f_lineno)
    attributes = _site_cache.get(key, _MISSING)
    if attributes is _MISSING:
        filename, lineno = key[1], key[2]
        code = linecache.getline(filename, lineno).strip()
        attributes = _make_attributes(encode_site(kind, _site_label(filename), lineno, code))
        _site_cache[key] = attributes
    _push_range(attributes)
    return True


def _wrap(owner: Any, attr: str, kind: str, needs_cuda: Callable[..., bool]) -> None:
    original = getattr(owner, attr)

    def in_range(args: tuple, kwargs: dict) -> Any:
        _state.active = True
        pushed = False
        try:
            pushed = _push(kind)
            return original(*args, **kwargs)
        finally:
            if pushed:
                _pop_range()
            _state.active = False

    # A tensor's repr calls .item()/.tolist() internally: only the outermost
    # call is the user's, so nested ones (_state.active) pass straight through.
    if needs_cuda is _on_cuda:
        # the common case, kept lean: it runs on every .item() of every CPU tensor too
        @functools.wraps(original)
        def wrapper(self, *args, **kwargs):
            if not self.is_cuda or _state.active:
                return original(self, *args, **kwargs)
            return in_range((self, *args), kwargs)
    else:
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if _state.active or not needs_cuda(*args, **kwargs):
                return original(*args, **kwargs)
            return in_range(args, kwargs)

    setattr(owner, attr, wrapper)
    _installed.append((owner, attr, original))


def _on_cuda(tensor, *args, **kwargs) -> bool:
    return getattr(tensor, "is_cuda", False)


def _always(*args, **kwargs) -> bool:
    return True


def _device_type(target: Any) -> str | None:
    """"cpu" for "cpu", "cpu:0", torch.device("cpu") or a CPU tensor; None for dtypes and the like."""
    if isinstance(target, str):
        return target.split(":", 1)[0]
    device = getattr(target, "device", None)  # a tensor: .to(other) copies to other's device
    if device is not None and not callable(device):
        target = device
    kind = getattr(target, "type", None)
    return kind if isinstance(kind, str) else None


def _to_cpu(tensor, *args, **kwargs) -> bool:
    if not getattr(tensor, "is_cuda", False):
        return False
    targets = [*args[:1], kwargs.get("device"), kwargs.get("other")]
    return any(_device_type(t) == "cpu" for t in targets if t is not None)


def nvtx_domain(name: str) -> Any:
    """The nvtx package's Domain for name, working around nsys 2023.4.

    nvtx >= 0.2.11 hands out a do-nothing DummyDomain when
    nvtxDomainIsEnabled() says 0.  nsys 2023.4 is attached (it sets
    NVTX_INJECTION64_PATH) and records domain ranges, but answers that call
    with 0, so every range would be dropped without a word.  In that case
    the real Domain is built past the check.
    """
    import nvtx

    domain = nvtx.get_domain(name)
    if type(domain).__name__ != "DummyDomain" or not os.environ.get("NVTX_INJECTION64_PATH"):
        return domain  # a real domain, or no tool attached (then no-ops are right)
    from nvtx._lib import lib

    real = object.__new__(lib.Domain)
    real.handle = lib.DomainHandle(name)
    real.__init__(name)
    return real


def _make_nvtx() -> tuple[Callable[[str], Any], Callable[[Any], Any], Callable[[], Any]]:
    """(make attributes from text, push them, pop): the nvtx package's domain
    when installed, else torch's default-domain ranges (same text), else
    nothing (a CPU-only torch has no NVTX)."""
    try:
        domain = nvtx_domain(DOMAIN)
        return (lambda text: domain.get_event_attributes(message=text)), domain.push_range, domain.pop_range
    except (ImportError, AttributeError, TypeError):
        pass
    import torch

    if hasattr(torch._C, "_nvtx"):
        return (lambda text: text), torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    return (lambda text: text), (lambda attributes: None), (lambda: None)


def _make_record_function() -> tuple[Callable[[str], Any], Callable[[Any], Any], Callable[[], Any]]:
    """(attributes, push, pop) as record_function ranges.  Only the outermost
    wrapped call pushes (_state.active), so one open range per thread at most."""
    import torch

    def push(text: str) -> None:
        _state.record = torch.profiler.record_function(text)
        _state.record.__enter__()

    def pop() -> None:
        _state.record.__exit__(None, None, None)
        _state.record = None

    return _kineto_safe, push, pop


def _kineto_safe(text: str) -> str:
    """Kineto writes record_function names into its JSON with no escaping of quotes (torch 2.11
    and 2.13; it turns backslashes into '/'): a source line like print(f"loss {x}") would make
    the whole trace invalid JSON.  Double quotes become single ones, as "|" becomes "¦"."""
    return text.replace('"', "'")


_make_attributes: Callable[[str], Any] = lambda text: text
_push_range: Callable[[Any], Any] = lambda attributes: None
_pop_range: Callable[[], Any] = lambda: None


def _skip_dirs(torch_dir: str) -> tuple[str, ...]:
    here = os.path.dirname(os.path.abspath(__file__))
    # with a trailing separator, so /site-packages/torch does not also hide torchvision
    return (os.path.join(torch_dir, ""), os.path.join(here, ""), "<frozen")


def install() -> None:
    """Wrap torch's synchronizing calls.  Idempotent."""
    global _SKIP_DIRS, _make_attributes, _push_range, _pop_range
    if _installed:
        return
    import torch

    if os.environ.get(RANGES_ENV) == RECORD_FUNCTION:
        _make_attributes, _push_range, _pop_range = _make_record_function()
    else:
        _make_attributes, _push_range, _pop_range = _make_nvtx()
    _SKIP_DIRS = _skip_dirs(os.path.dirname(torch.__file__))
    _site_cache.clear()
    for attr, kind in TENSOR_METHODS:
        if hasattr(torch.Tensor, attr):
            _wrap(torch.Tensor, attr, kind, _on_cuda)
    _wrap(torch.Tensor, "to", CPU, _to_cpu)
    _wrap(torch.cuda, "synchronize", SYNCHRONIZE, _always)
    _wrap(torch.cuda.Stream, "synchronize", SYNCHRONIZE, _always)
    _wrap(torch.cuda.Event, "synchronize", SYNCHRONIZE, _always)


class _InstallAfterTorch(importlib.abc.MetaPathFinder):
    """Calls install() right after the program's own ``import torch`` finishes."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_install(module):
            exec_module(module)
            install()

        spec.loader.exec_module = exec_then_install
        return spec


def install_when_imported() -> None:
    """install() now if torch is loaded, else as soon as the program imports it.

    A program that never imports torch runs untouched (and does not pay
    for importing it).
    """
    if "torch" in sys.modules:
        install()
    elif not any(isinstance(finder, _InstallAfterTorch) for finder in sys.meta_path):
        sys.meta_path.insert(0, _InstallAfterTorch())


def uninstall() -> None:
    """Put the original methods back (for benchmarks and tests)."""
    while _installed:
        owner, attr, original = _installed.pop()
        setattr(owner, attr, original)
    _site_cache.clear()
