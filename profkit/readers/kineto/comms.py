"""What each NCCL kernel's collective call moved, from a Kineto trace.

torch's profiler records a collective call twice: on its ``record_param_comms``
cpu_op and, copied there by the External id that links the op to its launch,
on the NCCL kernel's own args (torch 2.11 does both):

    "Collective name": "allreduce", "In msg nelems": 262912, "Out msg nelems": 262912,
    "Group size": 2, "dtype": "Float", "Process Group Name": "0",
    "Process Group Description": "default_pg"

The kernel's args are read first; an NCCL kernel without them takes those of
the record_param_comms op with its External id (traces where only the op
carries them).  Only kernels whose name holds "nccl" are looked at: a batch
without one costs one ``isin`` on the name codes, however many kernels it has.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profkit.model import schema
from profkit.readers.kineto.columns import Codes, Table, ints
from profkit.readers.kineto.parse import Args

# The kernels columns this module fills (profkit.model.schema.KERNELS documents them).
INT_COLUMNS = ("msg_in_nelems", "msg_out_nelems", "group_size")
TEXT_COLUMNS = ("collective", "msg_dtype", "process_group")
# A reader-internal kernels column: the External id of each NCCL kernel, the
# key to its record_param_comms op (-1 for every other kernel).
EXTERNAL_ID = "external_id"
COMM_OP = "record_param_comms"


def is_nccl(name: Any) -> bool:
    return isinstance(name, str) and "nccl" in name.lower()


def is_comm_op(name: Any) -> bool:
    return name == COMM_OP


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def group_label(args: Args) -> str | None:
    """'0 (default_pg)' from the process group's name and description (either alone when the other is absent)."""
    name, desc = _text(args.group_name), _text(args.group_desc)
    if name and desc:
        return f"{name} ({desc})"
    return name or desc


def _fields(args: Args) -> tuple[Any, ...]:
    """(collective, in nelems, out nelems, dtype, group size, process group), in TEXT/INT column terms."""
    return (_text(args.collective), args.in_nelems, args.out_nelems, _text(args.dtype), args.group_size,
            group_label(args))


def kernel_columns(table: Table, names: np.ndarray, args: list[Args]) -> dict[str, np.ndarray]:
    """The collective columns of a batch of kernels (text as codes of ``table``'s
    dictionaries), filled for NCCL kernels; {} when the batch has none (the
    table then fills the missing values)."""
    nccl = table.codes["name"].codes_where(is_nccl)
    rows = np.flatnonzero(np.isin(names, nccl)) if nccl else np.empty(0, dtype=np.int64)
    if not len(rows):
        return {}
    n = len(names)
    picked = [args[i] for i in rows.tolist()]
    fields = list(zip(*(_fields(a) for a in picked)))
    values = dict(zip(("collective", "msg_in_nelems", "msg_out_nelems", "msg_dtype", "group_size",
                       "process_group"), fields))
    out: dict[str, np.ndarray] = {}
    for column in INT_COLUMNS:
        out[column] = _scatter(n, rows, ints(values[column]), schema.MISSING_INT)
    for column in TEXT_COLUMNS:
        codes = table.codes[column]
        out[column] = _scatter(n, rows, codes.encode(values[column]), codes.encode([None])[0])
    out[EXTERNAL_ID] = _scatter(n, rows, ints([a.external_id for a in picked]), schema.MISSING_INT)
    return out


def _scatter(n: int, rows: np.ndarray, values: np.ndarray, missing: int) -> np.ndarray:
    full = np.full(n, missing, dtype=np.int64)
    full[rows] = values
    return full


class CommOps:
    """record_param_comms ops by External id: the call each one made."""

    def __init__(self) -> None:
        self.by_external_id: dict[int, tuple[Any, ...]] = {}

    def add(self, names: np.ndarray, name_codes: Codes, args: list[Args]) -> None:
        ops = name_codes.codes_where(is_comm_op)
        if not ops:
            return
        for i in np.flatnonzero(np.isin(names, ops)).tolist():
            a = args[i]
            if isinstance(a.external_id, int) and _text(a.collective):
                self.by_external_id[a.external_id] = _fields(a)

    def fill(self, kernels: Table) -> None:
        """Give NCCL kernels recorded without the call's fields those of their op
        (in place, once, after the whole trace is read)."""
        if not self.by_external_id or not kernels.rows:
            return
        external = kernels.column(EXTERNAL_ID)
        collective = kernels.codes["collective"]
        lacking = (external >= 0) & (kernels.column("collective") == collective.code_of(None))
        rows = [i for i in np.flatnonzero(lacking).tolist() if int(external[i]) in self.by_external_id]
        if not rows:
            return
        fields = list(zip(*(self.by_external_id[int(external[i])] for i in rows)))
        at = np.array(rows, dtype=np.int64)
        for k, column in enumerate(("collective", "msg_in_nelems", "msg_out_nelems", "msg_dtype", "group_size",
                                    "process_group")):
            full = kernels.column(column).copy()
            full[at] = kernels.codes[column].encode(fields[k]) if column in TEXT_COLUMNS else ints(fields[k])
            kernels.parts[column] = [full]
