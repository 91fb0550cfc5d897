"""Compare: did a change make the run slower, or is it noise?

Entry: ``diff.diff_traces(base, new)`` (``profkit diff``).

- ``same_program``: are two traces of one program (by their kernel names)?
- ``noise``: one noise model for step times (bootstrap CI of the median change, Mann-Whitney);
- ``diff``: step time, kernels, sync sites, resources and breakdown, base against new;
- ``memory``: peak memory per steady step, base against new (``diff``, ``history``).
"""
