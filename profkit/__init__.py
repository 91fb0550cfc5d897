"""profkit: GPU profiling and PTX analysis for kernel authors.

    import profkit
    t = profkit.open("run.sqlite")      # -> profkit.api.Profile: .kernels() .steps() ... as DataFrames
    r = profkit.open_ranks(["rank0.sqlite", "rank1.sqlite"])

The API is loaded on first use (``__getattr__``): ``import profkit``, which every
``import profkit.<module>`` runs first, stays as cheap as this file.
"""

from profkit._version import __version__

_API = ("open", "open_ranks", "Profile", "Ranks")
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> object:  # no typing import: it would double `import profkit`
    if name not in _API:
        raise AttributeError(f"module 'profkit' has no attribute {name!r}")
    from profkit import api

    return getattr(api, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
