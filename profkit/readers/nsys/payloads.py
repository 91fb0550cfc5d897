"""NVTX extended payloads of an nsys export, decoded by the schemas the export declares.

NVTX lets a program attach a binary payload to an event and describe its layout
once with a *schema* (``nvtxPayloadSchemaRegister``): named entries, each with
a type and an offset.  nsys writes the schemas to ``NVTX_PAYLOAD_SCHEMAS`` /
``NVTX_PAYLOAD_SCHEMA_ENTRIES`` (enums to ``NVTX_PAYLOAD_ENUMS`` /
``NVTX_PAYLOAD_ENUM_ENTRIES``) and, only with ``nsys export
--include-blobs=true``, each event's bytes to ``NVTX_EVENTS.binaryData``
(NULL otherwise).  Users: nsys's own Python sampler (schema "Python Periodic
Sampling") and NCCL ("Message size [bytes]").

The blob (nsys 2025.3, checked on the committed exports): a little-endian
``uint64`` count of payloads, then per payload ``{uint64 schemaId, uint64 size,
uint64 offset}`` (NVTX's ``nvtxPayloadData_t`` with the pointer turned into an
offset into the blob), then the payloads' bytes.  Every size and offset is
checked against the blob: bytes that do not fit this layout are an error, never
a silently wrong number.

Supported entry types (``nvToolsExtPayload.h``): the C integer and float types,
NVTX registered-string handles (exported as ``StringIds`` keys), enums and
nested schemas, and arrays whose length is another entry's value
(``NVTX_PAYLOAD_ENTRY_FLAG_ARRAY_LENGTH_INDEX``).  Anything else raises one
``ProfkitError`` naming the schema and entry.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from profkit.errors import ProfkitError

# nvToolsExtPayload.h: NVTX_PAYLOAD_ENTRY_TYPE_* -> struct format (LP64: long is 8 bytes)
SCALAR_FORMATS = {
    1: "b", 2: "B", 3: "h", 4: "H", 5: "i", 6: "I", 7: "q", 8: "Q", 9: "q", 10: "Q",
    11: "b", 12: "B", 13: "h", 14: "H", 15: "i", 16: "I", 17: "q", 18: "Q",
    19: "f", 20: "d",  # FLOAT, DOUBLE (21 LONGDOUBLE: no struct format, so unsupported)
    22: "Q", 23: "Q",  # SIZE (size_t: NCCL's "Message size [bytes]"), ADDRESS
    43: "f", 44: "d",  # FLOAT32, FLOAT64
}
REGISTERED_STRING_HANDLE = 80  # NVTX_PAYLOAD_ENTRY_TYPE_NVTX_REGISTERED_STRING_HANDLE
ARRAY_LENGTH_INDEX = 3 << 4    # NVTX_PAYLOAD_ENTRY_FLAG_ARRAY_LENGTH_INDEX
ARRAY_FLAGS = 3 << 4           # the array-kind bits of an entry's flags


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


class PayloadSchemas:
    """The schemas and enums of one export, and a decoder of payload blobs by them."""

    def __init__(self, schemas: dict[tuple[int, int], PayloadSchema],
                 enums: dict[tuple[int, int], PayloadEnum], strings: dict[int, str] | None = None) -> None:
        self.schemas = schemas
        self.enums = enums
        self.strings = strings if strings is not None else {}
        self._flats: dict[tuple[int, int], struct.Struct | None] = {}

    def _flat(self, schema: PayloadSchema) -> struct.Struct | None:
        """A struct of the whole schema where it is fixed-size scalars only (a stack frame: two string
        handles and a line): an array of it is then one ``iter_unpack``, not a call per field."""
        key = (schema.domain, schema.schema_id)
        if key not in self._flats:
            fmt, at = "<", 0
            for entry in sorted(schema.entries, key=lambda e: e.offset):
                code = "Q" if entry.type == REGISTERED_STRING_HANDLE else SCALAR_FORMATS.get(entry.type)
                if code is None or entry.flags & ARRAY_FLAGS or entry.offset < at:
                    fmt = None
                    break
                fmt += "x" * (entry.offset - at) + code
                at = entry.offset + struct.calcsize("<" + code)
            if fmt is not None and schema.size and schema.size >= at and not self.strings:
                self._flats[key] = struct.Struct(fmt + "x" * (schema.size - at))
            else:
                self._flats[key] = None
        return self._flats[key]

    def named(self, name: str) -> list[PayloadSchema]:
        return [s for s in self.schemas.values() if s.name == name]

    def decode(self, blob: bytes, domain: int) -> list[tuple[PayloadSchema, dict[str, Any]]]:
        """Every payload of one event: (its schema, {entry name: value}).  Registered strings
        stay ``StringIds`` keys (ints) unless the strings were given; enums become their labels."""
        blob = bytes(blob)
        count = self._unpack("<Q", blob, 0, "payload count")[0]
        if count > (len(blob) - 8) // 24:
            raise ProfkitError(f"an NVTX payload blob of {len(blob)} bytes claims {count} payloads: "
                               "a layout profkit does not know (exported by a newer nsys?)")
        out = []
        for k in range(count):
            schema_id, size, offset = self._unpack("<QQQ", blob, 8 + 24 * k, "payload header")
            if offset + size > len(blob):
                raise ProfkitError(f"an NVTX payload runs past its blob ({offset}+{size} > {len(blob)} bytes): "
                                   "a layout profkit does not know (exported by a newer nsys?)")
            schema = self.schema(domain, schema_id)
            out.append((schema, self._struct(schema, blob[offset:offset + size], 0)))
        return out

    def schema(self, domain: int, schema_id: int) -> PayloadSchema:
        found = self.schemas.get((domain, schema_id))
        if found is None:
            raise ProfkitError(f"an NVTX payload uses schema {schema_id} of domain {domain}, which the export "
                               "does not declare (NVTX_PAYLOAD_SCHEMAS)")
        return found

    # -- decoding ----------------------------------------------------------------------
    def _struct(self, schema: PayloadSchema, data: bytes, base: int) -> dict[str, Any]:
        values: dict[str, Any] = {}
        by_index: dict[int, Any] = {}
        for entry in schema.entries:
            kind = entry.flags & ARRAY_FLAGS
            if kind == 0:
                value, _ = self._value(schema, entry, data, base + entry.offset)
            elif kind == ARRAY_LENGTH_INDEX and entry.array_detail in by_index:
                length = by_index[entry.array_detail]
                if not isinstance(length, int) or length < 0:
                    raise self._unknown(schema, entry, "its array length is not a count")
                value, at = [], base + entry.offset
                nested = self.schemas.get((schema.domain, entry.type))
                flat = self._flat(nested) if nested is not None else None
                if flat is not None:
                    end = at + length * flat.size
                    if end > len(data):
                        raise self._unknown(schema, entry, f"{length} items that run past the payload")
                    names = [e.name for e in sorted(nested.entries, key=lambda e: e.offset)]
                    value = [dict(zip(names, item)) for item in flat.iter_unpack(data[at:end])]
                    length = 0
                for _ in range(length):
                    item, width = self._value(schema, entry, data, at)
                    value.append(item)
                    at += width
            else:
                raise self._unknown(schema, entry, f"array flags {entry.flags}")
            values[entry.name] = by_index[entry.index] = value
        return values

    def _value(self, schema: PayloadSchema, entry: Entry, data: bytes, at: int) -> tuple[Any, int]:
        """One value of an entry at byte ``at``, and its width."""
        fmt = SCALAR_FORMATS.get(entry.type)
        if fmt is not None:
            return self._unpack("<" + fmt, data, at, entry.name)[0], struct.calcsize(fmt)
        if entry.type == REGISTERED_STRING_HANDLE:
            key = self._unpack("<Q", data, at, entry.name)[0]
            return (self.strings.get(key, key) if self.strings else key), 8
        enum = self.enums.get((schema.domain, entry.type))
        if enum is not None:
            fmt = {1: "B", 2: "H", 4: "I", 8: "Q"}.get(enum.size)
            if fmt is None:
                raise self._unknown(schema, entry, f"an enum of {enum.size} bytes")
            raw = self._unpack("<" + fmt, data, at, entry.name)[0]
            return enum.labels.get(raw, raw), enum.size
        nested = self.schemas.get((schema.domain, entry.type))
        if nested is not None and nested.size:
            return self._struct(nested, data, at), nested.size
        raise self._unknown(schema, entry, f"entry type {entry.type}")

    @staticmethod
    def _unpack(fmt: str, data: bytes, at: int, what: str) -> tuple[Any, ...]:
        try:
            return struct.unpack_from(fmt, data, at)
        except struct.error:
            raise ProfkitError(f"an NVTX payload is too short for its {what!r} field "
                               f"({len(data)} bytes): a layout profkit does not know") from None

    @staticmethod
    def _unknown(schema: PayloadSchema, entry: Entry, what: str) -> ProfkitError:
        return ProfkitError(f"NVTX payload schema {schema.name or schema.schema_id!r}: entry {entry.name!r} has "
                            f"{what}, which profkit cannot decode")


def read_schemas(export: Any) -> PayloadSchemas:
    """The payload schemas and enums an nsys export declares (empty when it has none)."""
    schemas: dict[tuple[int, int], PayloadSchema] = {}
    enums: dict[tuple[int, int], PayloadEnum] = {}
    if export.has_table("NVTX_PAYLOAD_SCHEMAS") and export.has_table("NVTX_PAYLOAD_SCHEMA_ENTRIES"):
        entries: dict[tuple[int, int], list[Entry]] = {}
        for domain, schema_id, idx, flags, type_, name, detail, offset in export.rows(
                "SELECT domainId, schemaId, idx, flags, type, name, arrayOrUnionDetail, offset "
                "FROM NVTX_PAYLOAD_SCHEMA_ENTRIES ORDER BY domainId, schemaId, idx"):
            entries.setdefault((domain, schema_id), []).append(
                Entry(int(idx), name or "", int(type_ or 0), int(flags or 0), int(offset or 0),
                      None if detail is None else int(detail)))
        for domain, schema_id, name, size in export.rows(
                "SELECT domainId, schemaId, name, payloadSize FROM NVTX_PAYLOAD_SCHEMAS"):
            schemas[(domain, schema_id)] = PayloadSchema(domain, schema_id, name or "", size,
                                                        tuple(entries.get((domain, schema_id), ())))
    if export.has_table("NVTX_PAYLOAD_ENUMS") and export.has_table("NVTX_PAYLOAD_ENUM_ENTRIES"):
        labels: dict[tuple[int, int], dict[int, str]] = {}
        for domain, schema_id, name, value in export.rows(
                "SELECT domainId, schemaId, name, value FROM NVTX_PAYLOAD_ENUM_ENTRIES"):
            # nsys 2025.3 stores a 0 value as NULL (NCCL's redop enum: "Sum" has value NULL, "Product" 1)
            labels.setdefault((domain, schema_id), {})[int(value or 0)] = name or ""
        for domain, schema_id, size in export.rows("SELECT domainId, schemaId, size FROM NVTX_PAYLOAD_ENUMS"):
            enums[(domain, schema_id)] = PayloadEnum(domain, schema_id, int(size or 0),
                                                     labels.get((domain, schema_id), {}))
    return PayloadSchemas(schemas, enums)
