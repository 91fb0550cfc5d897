"""NVTX extended payloads of an nsys export, decoded by the schemas the export declares.

NVTX lets a program attach a binary payload to an event and describe its layout
once with a *schema* (``nvtxPayloadSchemaRegister``): named entries, each with
a type and an offset.  nsys writes the schemas to ``NVTX_PAYLOAD_SCHEMAS`` /
``NVTX_PAYLOAD_SCHEMA_ENTRIES`` (enums to ``NVTX_PAYLOAD_ENUMS`` /
``NVTX_PAYLOAD_ENUM_ENTRIES``) and, only with ``nsys export
--include-blobs=true``, each event's bytes to ``NVTX_EVENTS.binaryData``
(NULL otherwise).  Users: nsys's own Python sampler (schema "Python Periodic
Sampling") and NCCL (its init payload with the rank, "Message size [bytes]").

The blob (nsys 2025.3, checked on the committed exports): a little-endian
``uint64`` count of payloads, then per payload ``{uint64 schemaId, uint64 size,
uint64 offset}`` (NVTX's ``nvtxPayloadData_t`` with the pointer turned into an
offset into the blob), then the payloads' bytes.

Supported entry types (``nvToolsExtPayload.h``): the C integer and float types,
NVTX registered-string handles (exported as ``StringIds`` keys), enums, nested
fixed-size schemas, and arrays whose length is an earlier entry's value
(``NVTX_PAYLOAD_ENTRY_FLAG_ARRAY_LENGTH_INDEX``).

Schemas come from the file, so from strangers.  Each is checked once, before
any blob is read (``read_schemas``): typed columns, sizes and offsets >= 0,
every entry inside its schema's size and apart from the others, known entry
types, array lengths taken from an integer entry before them, and no schema
nested in itself (the nesting graph is walked with an explicit stack).  A
nested schema is then compiled into a flat list of fields, so decoding is a
loop over fields, never a recursion.  Every blob is checked against its size
before its values are read: an array's count times its item size must fit in
the payload, so the values read are at most the blob's bytes.  A schema that
fails a check is one ``ProfkitWarning`` and its payloads are skipped; a blob
that does not fit its schema is skipped and counted (``skipped``); the rest of
the trace is read.
"""

from __future__ import annotations

import struct
import warnings
from dataclasses import dataclass, field
from typing import Any

from profkit.errors import ProfkitError, ProfkitWarning

# nvToolsExtPayload.h: NVTX_PAYLOAD_ENTRY_TYPE_* -> struct format (LP64: long is 8 bytes)
SCALAR_FORMATS = {
    1: "b", 2: "B", 3: "h", 4: "H", 5: "i", 6: "I", 7: "q", 8: "Q", 9: "q", 10: "Q",
    11: "b", 12: "B", 13: "h", 14: "H", 15: "i", 16: "I", 17: "q", 18: "Q",
    19: "f", 20: "d",  # FLOAT, DOUBLE (21 LONGDOUBLE: no struct format, so unsupported)
    22: "Q", 23: "Q",  # SIZE (size_t: NCCL's "Message size [bytes]"), ADDRESS
    43: "f", 44: "d",  # FLOAT32, FLOAT64
}
INTEGER_TYPES = frozenset(t for t, code in SCALAR_FORMATS.items() if code not in "fd")
REGISTERED_STRING_HANDLE = 80  # NVTX_PAYLOAD_ENTRY_TYPE_NVTX_REGISTERED_STRING_HANDLE
ARRAY_LENGTH_INDEX = 3 << 4    # NVTX_PAYLOAD_ENTRY_FLAG_ARRAY_LENGTH_INDEX
ARRAY_FLAGS = 3 << 4           # the array-kind bits of an entry's flags
ENUM_FORMATS = {1: "B", 2: "H", 4: "I", 8: "Q"}
# No real schema comes near these; they bound what one crafted schema may cost to compile.
MAX_SCHEMA_BYTES = 1 << 20
MAX_FIELDS = 4096
MAX_NESTING = 32   # schemas inside schemas (nsys and NCCL nest one level)
WARNED_SCHEMAS = 5  # skipped schemas named one per line; the rest are counted in one more
_HEADER = struct.Struct("<QQQ")


class PayloadError(ProfkitError):
    """A blob or schema profkit cannot decode; readers skip it and read the rest."""


@dataclass(frozen=True)
class Entry:
    index: int
    name: str
    type: int
    flags: int
    offset: int
    array_detail: int | None


@dataclass(frozen=True)
class PayloadSchema:
    domain: int
    schema_id: int
    name: str
    size: int | None          # the static payload size (fixed-size schemas)
    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class PayloadEnum:
    domain: int
    schema_id: int
    size: int
    labels: dict[int, str]


@dataclass(frozen=True)
class _Leaf:
    """One scalar of a compiled schema: where it goes in the value, and how to read it."""

    path: tuple[str, ...]
    code: str
    offset: int
    labels: dict[int, str] | None  # an enum's labels


@dataclass
class _Unit:
    """A fixed-size value: its scalars in offset order, read with one struct."""

    leaves: tuple[_Leaf, ...]
    size: int
    reader: struct.Struct = field(init=False)
    _names: tuple[str, ...] | None = field(init=False)

    def __post_init__(self) -> None:
        fmt, at = "<", 0
        for leaf in self.leaves:
            fmt += f"{leaf.offset - at}x{leaf.code}"
            at = leaf.offset + struct.calcsize("<" + leaf.code)
        self.reader = struct.Struct(f"{fmt}{self.size - at}x")
        flat = all(len(leaf.path) == 1 and leaf.labels is None for leaf in self.leaves)
        self._names = tuple(leaf.path[0] for leaf in self.leaves) if flat else None

    def values(self, raw: tuple[Any, ...]) -> Any:
        """The unpacked scalars as the value: a scalar for a scalar entry, else {name: value}."""
        if self._names is not None:  # a struct of plain scalars (a stack frame): the common case
            return dict(zip(self._names, raw))
        out: dict[str, Any] = {}
        for leaf, value in zip(self.leaves, raw):
            if leaf.labels is not None:
                value = leaf.labels.get(value, value)
            if not leaf.path:
                return value
            place = out
            for name in leaf.path[:-1]:
                place = place.setdefault(name, {})
            place[leaf.path[-1]] = value
        return out


@dataclass(frozen=True)
class _Step:
    """How one top-level entry of a schema is read: a unit at an offset, or an array of units."""

    entry: Entry
    unit: _Unit
    length_index: int | None  # the entry whose value is the array's count; None: not an array


class PayloadSchemas:
    """The schemas and enums of one export, and a decoder of payload blobs by them.

    ``invalid`` maps each schema that failed a check to why; ``skipped`` counts the blobs
    ``decode_or_skip`` could not decode, ``first_skip`` says why the first was skipped."""

    def __init__(self, schemas: dict[tuple[int, int], PayloadSchema],
                 enums: dict[tuple[int, int], PayloadEnum],
                 invalid: dict[tuple[int, int], str] | None = None) -> None:
        self.schemas = schemas
        self.enums = enums
        self.invalid = dict(invalid or {})
        self._units: dict[tuple[int, int], _Unit] = {}
        self._steps: dict[tuple[int, int], tuple[_Step, ...]] = {}
        self._compile()
        self.skipped = 0
        self.first_skip = ""

    def named(self, name: str) -> list[PayloadSchema]:
        return [s for s in self.schemas.values() if s.name == name]

    def schema(self, domain: int, schema_id: int) -> PayloadSchema:
        found = self.schemas.get((domain, schema_id))
        if found is None:
            raise PayloadError(f"an NVTX payload uses schema {schema_id} of domain {domain}, which the export "
                               "does not declare (NVTX_PAYLOAD_SCHEMAS)")
        return found

    # -- decoding ----------------------------------------------------------------------
    def decode(self, blob: Any, domain: Any) -> list[tuple[PayloadSchema, dict[str, Any]]]:
        """Every payload of one event: (its schema, {entry name: value}).  Registered strings stay
        ``StringIds`` keys (ints); enums become their labels.  A PayloadError when the blob does not
        fit its layout; payloads of a schema that failed its checks are left out."""
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            raise PayloadError(f"an NVTX payload blob is {type(blob).__name__}, not bytes")
        if not isinstance(domain, int):
            raise PayloadError(f"an NVTX event's domainId is {type(domain).__name__}, not an integer")
        data = memoryview(blob).cast("B")
        if len(data) < 8:
            raise PayloadError(f"an NVTX payload blob of {len(data)} bytes has no payload count")
        (count,) = struct.unpack_from("<Q", data, 0)
        if count > (len(data) - 8) // _HEADER.size:
            raise PayloadError(f"an NVTX payload blob of {len(data)} bytes claims {count} payloads")
        out = []
        for k in range(count):
            schema_id, size, offset = _HEADER.unpack_from(data, 8 + _HEADER.size * k)
            if offset > len(data) or size > len(data) - offset:
                raise PayloadError(f"an NVTX payload runs past its blob ({offset}+{size} > {len(data)} bytes)")
            key = (domain, schema_id)
            if key in self.invalid:
                continue  # warned about once, when the schemas were read
            schema = self.schema(domain, schema_id)
            out.append((schema, self._decode(schema, data[offset:offset + size])))
        return out

    def decode_or_skip(self, blob: Any, domain: Any) -> list[tuple[PayloadSchema, dict[str, Any]]]:
        """``decode``, or [] for a blob that does not decode (counted in ``skipped``)."""
        try:
            return self.decode(blob, domain)
        except PayloadError as exc:
            self.skip(exc.message)
            return []

    def skip(self, why: str) -> None:
        """Count one event left out (its blob, or its row, is not what nsys writes)."""
        self.skipped += 1
        self.first_skip = self.first_skip or why

    def warn_skipped(self, what: str) -> None:
        """One warning for all the events ``what`` (``"NCCL payloads"``) left out, if any."""
        if self.skipped:
            warnings.warn(f"{self.skipped:,} {what} skipped as unreadable (the first: {self.first_skip})",
                          ProfkitWarning, stacklevel=2)

    def _decode(self, schema: PayloadSchema, data: memoryview) -> dict[str, Any]:
        values: dict[str, Any] = {}
        by_index: dict[int, Any] = {}
        for step in self._steps[(schema.domain, schema.schema_id)]:
            entry, unit, at = step.entry, step.unit, step.entry.offset
            if step.length_index is None:
                if at + unit.size > len(data):
                    raise PayloadError(f"an NVTX payload of {len(data)} bytes is too short for its "
                                       f"{entry.name!r} field (schema {_label(schema)})")
                value = unit.values(unit.reader.unpack_from(data, at))
            else:
                length = by_index.get(step.length_index)
                if not isinstance(length, int) or length < 0:
                    raise PayloadError(f"the count of {entry.name!r} is {length!r} (schema {_label(schema)})")
                if at > len(data) or length > (len(data) - at) // unit.size:
                    raise PayloadError(f"{length:,} {entry.name!r} items of {unit.size} bytes run past a "
                                       f"payload of {len(data)} bytes (schema {_label(schema)})")
                value = [unit.values(raw) for raw in unit.reader.iter_unpack(data[at:at + length * unit.size])]
            values[entry.name] = by_index[entry.index] = value
        return values

    # -- checking and compiling the schemas, once -----------------------------------------
    def _compile(self) -> None:
        """Check every schema and compile the sound ones; each one found unsound is one warning."""
        for key in _nesting_order(self.schemas, self.enums, self.invalid):
            if key in self.invalid:
                continue
            try:
                self._compile_one(self.schemas[key])
            except PayloadError as exc:
                self.invalid[key] = exc.message
        for key, why in list(self.invalid.items())[:WARNED_SCHEMAS]:
            schema = self.schemas.get(key)
            name = _label(schema) if schema is not None else repr(key[1])
            warnings.warn(f"NVTX payload schema {name} is skipped: {why}", ProfkitWarning, stacklevel=3)
        if len(self.invalid) > WARNED_SCHEMAS:
            warnings.warn(f"{len(self.invalid) - WARNED_SCHEMAS:,} more NVTX payload schemas are skipped",
                          ProfkitWarning, stacklevel=3)

    def _compile_one(self, schema: PayloadSchema) -> None:
        key = (schema.domain, schema.schema_id)
        if schema.size is not None and not (_is_int(schema.size) and 0 <= schema.size <= MAX_SCHEMA_BYTES):
            raise PayloadError(f"its payloadSize {schema.size!r} is not a byte count")
        for entry in schema.entries:
            if not all(_is_int(v) for v in (entry.index, entry.type, entry.flags, entry.offset)) or \
                    not (entry.array_detail is None or _is_int(entry.array_detail)):
                raise PayloadError(f"entry {entry.name!r} has a field that is not an integer")
            if not 0 <= entry.offset <= MAX_SCHEMA_BYTES:
                raise PayloadError(f"entry {entry.name!r} is at offset {entry.offset}")
        steps: list[_Step] = []
        indexes = {e.index: e for e in schema.entries}
        for entry in schema.entries:
            unit = self._entry_unit(schema, entry)
            kind = entry.flags & ARRAY_FLAGS
            if kind == 0:
                steps.append(_Step(entry, unit, None))
                continue
            counter = indexes.get(entry.array_detail) if entry.array_detail is not None else None
            if kind != ARRAY_LENGTH_INDEX or counter is None or counter.index >= entry.index \
                    or counter.flags & ARRAY_FLAGS or counter.type not in INTEGER_TYPES:
                raise PayloadError(f"entry {entry.name!r} is an array (flags {entry.flags}) whose length is not "
                                   "an integer entry before it")
            if unit.size == 0:
                raise PayloadError(f"entry {entry.name!r} is an array of empty items")
            steps.append(_Step(entry, unit, counter.index))
        if schema.size is not None:
            if any(s.length_index is not None for s in steps):
                raise PayloadError(f"it declares a fixed size ({schema.size} bytes) and holds an array")
            if any(len(leaf.path) >= MAX_NESTING for s in steps for leaf in s.unit.leaves):
                raise PayloadError(f"it nests schemas more than {MAX_NESTING} deep")
            leaves = [_Leaf((s.entry.name, *leaf.path), leaf.code, s.entry.offset + leaf.offset, leaf.labels)
                      for s in steps for leaf in s.unit.leaves]
            if len(leaves) > MAX_FIELDS:
                raise PayloadError(f"it holds {len(leaves):,} fields, more than the {MAX_FIELDS:,} profkit reads")
            leaves.sort(key=lambda leaf: leaf.offset)
            at = 0
            for leaf in leaves:
                if leaf.offset < at:
                    raise PayloadError(f"its field {'.'.join(leaf.path)!r} overlaps the one before it")
                at = leaf.offset + struct.calcsize("<" + leaf.code)
            if at > schema.size:
                raise PayloadError(f"its fields end at byte {at}, past its size of {schema.size} bytes")
            self._units[key] = _Unit(tuple(leaves), schema.size)
        self._steps[key] = tuple(steps)

    def _entry_unit(self, schema: PayloadSchema, entry: Entry) -> _Unit:
        """How one value of ``entry`` is read (one item, for an array)."""
        code = "Q" if entry.type == REGISTERED_STRING_HANDLE else SCALAR_FORMATS.get(entry.type)
        if code is not None:
            return _Unit((_Leaf((), code, 0, None),), struct.calcsize("<" + code))
        enum = self.enums.get((schema.domain, entry.type))
        if enum is not None:
            if enum.size not in ENUM_FORMATS:
                raise PayloadError(f"entry {entry.name!r} is an enum of {enum.size} bytes")
            return _Unit((_Leaf((), ENUM_FORMATS[enum.size], 0, enum.labels),), enum.size)
        nested = self._units.get((schema.domain, entry.type))
        if nested is not None:
            return nested
        if (schema.domain, entry.type) in self.invalid:
            raise PayloadError(f"entry {entry.name!r} is of schema {entry.type}, which is skipped")
        if (schema.domain, entry.type) in self.schemas:
            raise PayloadError(f"entry {entry.name!r} is of schema {entry.type}, which has no fixed size")
        raise PayloadError(f"entry {entry.name!r} has entry type {entry.type}, which profkit cannot decode")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _label(schema: PayloadSchema) -> str:
    return repr(schema.name or schema.schema_id)


def _nesting_order(schemas: dict[tuple[int, int], PayloadSchema], enums: dict[tuple[int, int], PayloadEnum],
                   invalid: dict[tuple[int, int], str]) -> list[tuple[int, int]]:
    """The schemas, each after the schemas nested in it; a schema on a cycle of nesting is marked
    in ``invalid``.  A depth-first walk with an explicit stack: a chain of 100,000 nested
    schemas costs no recursion."""
    def nested(key: tuple[int, int]) -> list[tuple[int, int]]:
        return [(key[0], e.type) for e in schemas[key].entries
                if e.type not in SCALAR_FORMATS and e.type != REGISTERED_STRING_HANDLE
                and (key[0], e.type) in schemas and (key[0], e.type) not in enums]

    order: list[tuple[int, int]] = []
    state: dict[tuple[int, int], int] = {}  # 1: on the walk's path, 2: done
    for root in schemas:
        if root in state:
            continue
        stack = [(root, iter(nested(root)))]
        state[root] = 1
        while stack:
            key, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                state[key] = 2
                order.append(key)
            elif state.get(child) == 1:
                cycle = [k for k, _ in stack][[k for k, _ in stack].index(child):]
                for member in cycle:
                    invalid.setdefault(member, f"it is nested in itself ({len(cycle)} schema(s) in a cycle)")
            elif child not in state:
                state[child] = 1
                stack.append((child, iter(nested(child))))
    return order


def _integer(value: Any, allow_none: bool = False) -> int | None:
    """An integer column's value, or raise for anything else (text, a blob, a float)."""
    if value is None and allow_none:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise PayloadError(f"{value!r} where an integer belongs")


def read_schemas(export: Any) -> PayloadSchemas:
    """The payload schemas and enums an nsys export declares (empty when it has none); each one
    that does not pass its checks is one ``ProfkitWarning`` and listed in ``invalid``."""
    schemas: dict[tuple[int, int], PayloadSchema] = {}
    enums: dict[tuple[int, int], PayloadEnum] = {}
    invalid: dict[tuple[int, int], str] = {}
    if export.has_table("NVTX_PAYLOAD_ENUMS") and export.has_table("NVTX_PAYLOAD_ENUM_ENTRIES"):
        labels: dict[tuple[int, int], dict[int, str]] = {}
        for domain, schema_id, name, value in export.rows(
                "SELECT domainId, schemaId, name, value FROM NVTX_PAYLOAD_ENUM_ENTRIES"):
            # nsys 2025.3 stores a 0 value as NULL (NCCL's redop enum: "Sum" has value NULL, "Product" 1)
            if isinstance(domain, int) and isinstance(schema_id, int) and isinstance(value, (int, type(None))):
                labels.setdefault((domain, schema_id), {})[int(value or 0)] = str(name or "")
        for domain, schema_id, size in export.rows("SELECT domainId, schemaId, size FROM NVTX_PAYLOAD_ENUMS"):
            if isinstance(domain, int) and isinstance(schema_id, int):
                enums[(domain, schema_id)] = PayloadEnum(domain, schema_id, size if isinstance(size, int) else 0,
                                                         labels.get((domain, schema_id), {}))
    if export.has_table("NVTX_PAYLOAD_SCHEMAS") and export.has_table("NVTX_PAYLOAD_SCHEMA_ENTRIES"):
        entries: dict[tuple[int, int], dict[int, Entry]] = {}
        for domain, schema_id, idx, flags, type_, name, detail, offset in export.rows(
                "SELECT domainId, schemaId, idx, flags, type, name, arrayOrUnionDetail, offset "
                "FROM NVTX_PAYLOAD_SCHEMA_ENTRIES ORDER BY domainId, schemaId, idx"):
            if not isinstance(domain, int) or not isinstance(schema_id, int):
                continue  # belongs to no schema profkit could name
            key = (domain, schema_id)
            try:
                entry = Entry(_integer(idx), str(name or ""), _integer(type_), _integer(flags or 0),
                              _integer(offset or 0), _integer(detail, allow_none=True))
                if entry.offset < 0 or entry.offset > MAX_SCHEMA_BYTES:
                    raise PayloadError(f"entry {entry.name!r} is at offset {entry.offset}")
            except PayloadError as exc:
                invalid.setdefault(key, exc.message)
                continue
            # every process registering a schema gets its rows (whole-job exports: one copy per rank)
            if entries.setdefault(key, {}).setdefault(entry.index, entry) != entry:
                invalid.setdefault(key, f"two of its entries have index {entry.index}")
        for domain, schema_id, name, size in export.rows(
                "SELECT domainId, schemaId, name, payloadSize FROM NVTX_PAYLOAD_SCHEMAS"):
            if not isinstance(domain, int) or not isinstance(schema_id, int):
                continue
            key = (domain, schema_id)
            schemas[key] = PayloadSchema(domain, schema_id, str(name or ""), size if isinstance(size, int) else None,
                                         tuple(entries.get(key, {}).values()))
            if size is not None and not (isinstance(size, int) and 0 <= size <= MAX_SCHEMA_BYTES):
                invalid.setdefault(key, f"its payloadSize {size!r} is not a byte count")
        for key in entries.keys() - schemas.keys():
            invalid.pop(key, None)  # entries of no declared schema: never used
    return PayloadSchemas(schemas, enums, invalid)
