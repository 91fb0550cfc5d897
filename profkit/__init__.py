"""profkit: GPU profiling and PTX analysis for kernel authors."""

__version__ = "0.1.0"
