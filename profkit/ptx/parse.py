"""Reading PTX and SASS listings: one kernel's lines, and what each instruction does.

Both languages are classified into the same categories, so a summary or a
diff reads the same for PTX and SASS.  Global memory widths are in bits:
Triton's ``@%p1 ld.global.v4.b32`` and nvcc's ``ld.global.nc.v4.u32`` are both
128; ``LDG.E.128``, ``LDG.E.128.CONSTANT`` and ``STG.E.128`` are 128 and
``LDG.E.ENL2.256`` (sm_100) is 256.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

# Display order; "padding" (NOPs, the trap loop after EXIT) is not counted.
CATEGORIES = (
    "global_load", "global_store", "global_atomic", "shared_load", "shared_store", "shared_atomic",
    "local_load", "local_store", "generic_load", "generic_store", "tma", "fma", "fp", "sfu", "mma",
    "int", "convert", "move", "branch", "barrier", "other",
)


@dataclass(frozen=True)
class Instruction:
    line: int  # index into Listing.lines
    opcode: str  # "ld.global.v4.b32", "LDG.E.128"
    category: str
    width_bits: int | None = None  # global memory ops only
    readonly: bool = False  # .nc / .CONSTANT: through the read-only (texture) path
    asynchronous: bool = False  # cp.async / LDGSTS: global -> shared without registers


@dataclass
class Listing:
    """One kernel's listing as shown, with its instructions classified."""

    language: str  # "ptx" | "sass"
    function: str
    lines: list[str]
    instructions: list[Instruction] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def by_line(self) -> dict[int, Instruction]:
        return {ins.line: ins for ins in self.instructions}


# --------------------------------------------------------------------------- PTX

_PTX_TYPE_BITS = {
    "b8": 8, "u8": 8, "s8": 8, "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16, "e4m3": 8, "e5m2": 8,
    "b32": 32, "u32": 32, "s32": 32, "f32": 32, "f16x2": 32, "bf16x2": 32, "tf32": 32,
    "b64": 64, "u64": 64, "s64": 64, "f64": 64, "f32x2": 64, "b128": 128,
}
_PTX_FLOAT_TYPES = {"f16", "f16x2", "bf16", "bf16x2", "f32", "f32x2", "f64", "tf32"}
_PTX_SFU = {"ex2", "lg2", "sin", "cos", "tanh", "rsqrt", "rcp", "sqrt"}
_PTX_INT_ONLY = {"shl", "shr", "and", "or", "xor", "not", "lop3", "prmt", "bfe", "bfi", "popc", "clz",
                 "brev", "bfind", "mul24", "mad24", "sad", "dp4a", "dp2a", "szext", "bmsk", "cnot"}
_PTX_ARITH = {"add", "sub", "mul", "mad", "fma", "div", "rem", "min", "max", "neg", "abs", "setp", "set",
              "copysign", "testp", "addc", "subc", "madc"}

_PTX_PREDICATE = re.compile(r"^@!?%?[\w]+\s+")
_PTX_OPCODE = re.compile(r"^([a-z][\w.:]*)")


def classify_ptx(statement: str, line: int = 0) -> Instruction | None:
    """Classify one PTX statement (without comment); None for directives and labels."""
    text = statement.strip()
    if not text or text[0] in ".{}$" or text.startswith("//") or re.match(r"^[\w$]+:", text):
        return None
    text = _PTX_PREDICATE.sub("", text)
    m = _PTX_OPCODE.match(text)
    if not m:
        return None
    opcode = m.group(1)
    tokens = opcode.split(".")
    base, qualifiers = tokens[0], set(tokens[1:])
    types = [t for t in tokens[1:] if t in _PTX_TYPE_BITS]

    if base in ("ld", "ldu", "st"):
        space = _ptx_space(tokens)
        direction = "store" if base == "st" else "load"
        if space in ("param", "const"):
            return Instruction(line, opcode, "move")
        category = f"{space or 'generic'}_{direction}"
        width = None
        if space == "global" or space is None:
            vector = next((int(t[1:]) for t in tokens if re.fullmatch(r"v\d+", t)), 1)
            width = vector * _PTX_TYPE_BITS[types[-1]] if types else None
        return Instruction(line, opcode, category, width, readonly="nc" in qualifiers or base == "ldu")
    if base in ("atom", "red"):
        space = _ptx_space(tokens)
        return Instruction(line, opcode, f"{space}_atomic" if space in ("global", "shared") else "global_atomic")
    if base in ("cp", "cp.async"):
        if "bulk" in qualifiers or "reduce" in qualifiers:
            return Instruction(line, opcode, "barrier" if _is_group_op(tokens) else "tma")
        if "async" in qualifiers:
            if _is_group_op(tokens):
                return Instruction(line, opcode, "barrier")
            size = _nth_operand_int(text[len(opcode):], 2)
            return Instruction(line, opcode, "global_load", size * 8 if size else None, asynchronous=True)
        return Instruction(line, opcode, "other")
    if base == "ldmatrix":
        return Instruction(line, opcode, "shared_load")
    if base == "stmatrix":
        return Instruction(line, opcode, "shared_store")
    if base == "wgmma":
        kind = "mma" if tokens[1].startswith("mma") else "barrier"  # fence / commit_group / wait_group
        return Instruction(line, opcode, kind)
    if base == "mma" or (base == "tcgen05" and "mma" in tokens):
        return Instruction(line, opcode, "mma")
    if base in _PTX_SFU and "approx" in qualifiers:
        return Instruction(line, opcode, "sfu")
    if base in ("fma", "mad") and any(t in _PTX_FLOAT_TYPES for t in types):
        return Instruction(line, opcode, "fma")
    if base in _PTX_ARITH or base in _PTX_SFU:
        return Instruction(line, opcode, "fp" if any(t in _PTX_FLOAT_TYPES for t in types) else "int")
    if base in _PTX_INT_ONLY or base == "mul":
        return Instruction(line, opcode, "int")
    if base in ("cvt", "cvta", "cvt.rn"):
        return Instruction(line, opcode, "convert")
    if base in ("mov", "selp", "slct", "shfl", "prmt"):
        return Instruction(line, opcode, "move")
    if base in ("bra", "brx", "call"):
        return Instruction(line, opcode, "branch")
    if base in ("bar", "barrier", "fence", "membar", "mbarrier", "griddepcontrol", "elect"):
        return Instruction(line, opcode, "barrier")
    return Instruction(line, opcode, "other")


def _ptx_space(tokens: list[str]) -> str | None:
    for token in tokens[1:]:
        head = token.split("::")[0]
        if head in ("global", "shared", "local", "param", "const"):
            return head
    return None


def _is_group_op(tokens: list[str]) -> bool:
    return any(t in ("commit_group", "wait_group", "wait_group_read", "wait_all", "mbarrier") for t in tokens)


def _nth_operand_int(operands: str, n: int) -> int | None:
    parts = [p.strip() for p in re.split(r",(?![^\[]*\])", operands.rstrip(";"))]
    if len(parts) > n and re.fullmatch(r"\d+|0[xX][0-9a-fA-F]+", parts[n]):
        return int(parts[n], 0)  # Triton writes the size as 0x10
    return None


_PTX_FUNCTION = re.compile(r"^\s*(?:\.(?:visible|extern|weak)\s+)*\.(entry|func)\b")
_PTX_DEBUG_SECTION = re.compile(r"^\s*\.section\s+\.debug")
_PTX_CALL = re.compile(r"\bcall(?:\.uni)?\s+(?:\([^)]*\)\s*,\s*)?([\w$]+)")
_DEBUG_LABEL = re.compile(r"^\s*\$L__(?:tmp|func_begin|func_end|info_string)\d+:\s*$")


def _strip_comment(line: str) -> str:
    return line.split("//", 1)[0]


@dataclass(frozen=True)
class _Block:
    kind: str  # entry | func | debug
    name: str
    start: int
    end: int  # inclusive
    prototype: bool = False


def _ptx_blocks(lines: list[str]) -> list[_Block]:
    blocks = []
    i = 0
    while i < len(lines):
        func = _PTX_FUNCTION.match(lines[i])
        if not func and not _PTX_DEBUG_SECTION.match(lines[i]):
            i += 1
            continue
        depth, seen_brace, header, j = 0, False, [], i
        prototype = False
        while j < len(lines):
            code = _strip_comment(lines[j])
            if not seen_brace:
                header.append(code)
            for ch in code:
                if ch == "{":
                    depth += 1
                    seen_brace = True
                elif ch == "}":
                    depth -= 1
            if seen_brace and depth == 0:
                break
            if not seen_brace and code.rstrip().endswith(";"):
                prototype = True  # ".extern .func foo(...);" declares, it does not define
                break
            j += 1
        if func:
            header_text = " ".join(header)
            m = re.search(r"\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)", header_text)
            blocks.append(_Block(func.group(1), m.group(1) if m else "?", i, min(j, len(lines) - 1), prototype))
        else:
            blocks.append(_Block("debug", "", i, min(j, len(lines) - 1)))
        i = j + 1
    return blocks


def ptx_entries(ptx: str) -> list[str]:
    """Names of the kernels (.entry) in a PTX module."""
    return [b.name for b in _ptx_blocks(ptx.splitlines()) if b.kind == "entry"]


def ptx_listing(ptx: str, function: str, raw: bool = False) -> Listing:
    """One kernel's PTX: the module header, the entry and the functions it calls.

    Unless ``raw``, debug sections, ``.loc``/``.file`` directives and debug-only
    labels are left out: they are most of Triton's PTX and none of its code.
    """
    lines = ptx.splitlines()
    blocks = _ptx_blocks(lines)
    by_name = {b.name: b for b in blocks if b.kind in ("entry", "func") and not b.prototype}
    if function not in by_name:
        raise KeyError(function)
    keep = {function}
    pending = [function]
    while pending:
        block = by_name[pending.pop()]
        for line in lines[block.start:block.end + 1]:
            m = _PTX_CALL.search(_strip_comment(line))
            if m and m.group(1) in by_name and m.group(1) not in keep:
                keep.add(m.group(1))
                pending.append(m.group(1))
    if raw:
        chosen = list(range(len(lines)))
    else:
        skipped = set()
        for b in blocks:
            if b.kind == "debug" or (b.kind in ("entry", "func") and not b.prototype and b.name not in keep):
                skipped.update(range(b.start, b.end + 1))
        chosen = [i for i, line in enumerate(lines) if i not in skipped and not _is_debug_line(line)]
    shown: list[str] = []
    instructions = []
    in_body = {i for b in blocks if b.name in keep and b.kind in ("entry", "func") for i in range(b.start, b.end + 1)}
    for i in chosen:
        line = lines[i]
        if not raw and not line.strip() and shown and not shown[-1].strip():
            continue  # collapse the blank runs left where debug lines were
        if i in in_body:
            ins = classify_ptx(_strip_comment(line), len(shown))
            if ins is not None:
                instructions.append(ins)
        shown.append(line)
    while shown and not shown[-1].strip():
        shown.pop()
    return Listing("ptx", function, shown, instructions)


def _is_debug_line(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith((".loc", ".file")) or bool(_DEBUG_LABEL.match(line))


# --------------------------------------------------------------------------- SASS

_SASS_LINE = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s*(.*?)\s*;?\s*(?:/\*.*\*/)?\s*$")
_SASS_PREDICATE = re.compile(r"^@!?U?P[T\d]+\s+")
_SASS_SECTION = re.compile(r"^//-+\s+\.text\.(\S+)\s+-+")
_SASS_SYMBOLS = re.compile(r"^//-+\s+(?!\.text\.)")
_SASS_LABEL = re.compile(r"^\s*(\.L_x_\d+):")

_SASS_FMA = {"FFMA", "FFMA2", "FFMA32I", "HFMA2", "HFMA2.MMA", "DFMA", "HFMA", "BFMA"}
_SASS_FP = {"FADD", "FADD2", "FADD32I", "FMUL", "FMUL2", "FMUL32I", "FMNMX", "FMNMX3", "FSETP", "FSET", "FSEL",
            "FCHK", "FRND", "FSWZADD", "HADD2", "HMUL2", "HMNMX2", "HSETP2", "HSET2", "DADD", "DMUL", "DSETP",
            "DMNMX", "FADD3"}
_SASS_CONVERT = {"F2F", "F2I", "I2F", "I2FP", "F2FP", "I2I", "F2IP", "FRND"}
_SASS_MOVE = {"MOV", "UMOV", "MOV32I", "S2R", "S2UR", "CS2R", "LDC", "ULDC", "R2UR", "SEL", "USEL", "SHFL",
              "PRMT", "UPRMT", "R2P", "P2R", "LDCU", "VOTE", "VOTEU", "PLOP3", "UPLOP3"}
_SASS_BRANCH = {"BRA", "BRX", "JMP", "JMX", "CALL", "RET", "BRXU", "JMXU"}
_SASS_BARRIER = {"BAR", "SYNCS", "MEMBAR", "DEPBAR", "WARPSYNC", "ERRBAR", "LDGDEPBAR", "FENCE", "CCTL",
                 "ARRIVES", "UCGABAR_ARV", "UCGABAR_WAIT"}


def classify_sass(statement: str, line: int = 0) -> Instruction | None:
    """Classify one SASS instruction text such as ``@!P1 LDG.E.128 R8, desc[UR4][R2.64]``."""
    text = _SASS_PREDICATE.sub("", statement.strip())
    if not text:
        return None
    opcode = text.split()[0]
    tokens = opcode.split(".")
    base, modifiers = tokens[0], tokens[1:]
    if base in ("NOP",):
        return Instruction(line, opcode, "padding")
    if base in ("LDG", "STG", "LDGSTS"):
        category = "global_store" if base == "STG" else "global_load"
        return Instruction(line, opcode, category, _sass_width(modifiers),
                           readonly="CONSTANT" in modifiers, asynchronous=base == "LDGSTS")
    if base in ("ATOMG", "RED", "REDG", "ATOM"):
        return Instruction(line, opcode, "global_atomic")
    if base in ("ATOMS", "REDS"):
        return Instruction(line, opcode, "shared_atomic")
    if base in ("LDS", "LDSM", "LDSU"):
        return Instruction(line, opcode, "shared_load")
    if base in ("STS", "STSM"):
        return Instruction(line, opcode, "shared_store")
    if base == "LDL":
        return Instruction(line, opcode, "local_load")
    if base == "STL":
        return Instruction(line, opcode, "local_store")
    if base == "LD":
        return Instruction(line, opcode, "generic_load", _sass_width(modifiers), readonly="CONSTANT" in modifiers)
    if base == "ST":
        return Instruction(line, opcode, "generic_store", _sass_width(modifiers))
    if base.startswith(("UTMA", "UBLKCP", "UBLKRED", "UBLKPF")):
        return Instruction(line, opcode, "tma")
    if opcode in _SASS_FMA or base in _SASS_FMA:
        return Instruction(line, opcode, "fma")
    if base == "MUFU":
        return Instruction(line, opcode, "sfu")
    if base.endswith("MMA") and base not in ("UTCBAR",):
        return Instruction(line, opcode, "mma")
    if base in _SASS_FP:
        return Instruction(line, opcode, "fp")
    if base in _SASS_CONVERT:
        return Instruction(line, opcode, "convert")
    if base in _SASS_MOVE:
        return Instruction(line, opcode, "move")
    if base in _SASS_BRANCH:
        return Instruction(line, opcode, "branch")
    if base in _SASS_BARRIER:
        return Instruction(line, opcode, "barrier")
    if base in ("EXIT", "BSSY", "BSYNC", "BPT", "KILL", "NANOSLEEP", "YIELD", "BMOV", "ACQBULK", "PMTRIG"):
        return Instruction(line, opcode, "other")
    if base.startswith(("U", "I")) or base in (
            "LEA", "LOP3", "SHF", "POPC", "FLO", "SGXT", "BMSK", "VIADD", "VIMNMX", "VIADDMNMX", "BREV", "LEA.HI"):
        return Instruction(line, opcode, "int")
    return Instruction(line, opcode, "other")


def _sass_width(modifiers: list[str]) -> int:
    """Access width in bits from LDG/STG modifiers; LTC128B (an L2 hint) is not a width."""
    for token in modifiers:
        if token in ("8", "16", "32", "64", "128", "256", "512"):
            return int(token)
        if token in ("U8", "S8"):
            return 8
        if token in ("U16", "S16"):
            return 16
    return 32


def sass_functions(sass: str) -> list[str]:
    return [m.group(1) for line in sass.splitlines() if (m := _SASS_SECTION.match(line))]


def sass_target(sass: str) -> str | None:
    m = re.search(r"^\s*\.target\s+(sm_\w+)", sass, re.MULTILINE)
    return m.group(1) if m else None


def sass_listing(sass: str, function: str, raw: bool = False) -> Listing:
    """One kernel's SASS from ``nvdisasm -c``.  Unless ``raw``, ELF directives are left out."""
    lines = sass.splitlines()
    header = [line for line in lines[:10] if line.strip().startswith(".target")]
    start = end = None
    for i, line in enumerate(lines):
        m = _SASS_SECTION.match(line)
        if start is None and m and m.group(1) == function:
            start = i
        elif start is not None and (m or _SASS_SYMBOLS.match(line)):
            end = i
            break
    if start is None:
        raise KeyError(function)
    body = lines[start:end]
    if raw:
        body = lines
    shown: list[str] = [] if raw else [*header, ""]
    instructions: list[Instruction] = []
    last_label = None
    for line in body:
        stripped = line.strip()
        if not raw and (not stripped and shown and not shown[-1].strip()):
            continue
        if not raw and stripped.startswith(".") and not _SASS_LABEL.match(line):
            continue
        label = _SASS_LABEL.match(line)
        m = _SASS_LINE.match(line)
        index = len(shown)
        shown.append(line)
        if label:
            last_label = label.group(1)
            continue
        if m:
            ins = classify_sass(m.group(2), index)
            if ins is not None:
                # ptxas ends every kernel with "BRA `(.L_x_N)" jumping to itself, never run.
                if ins.category == "branch" and last_label and f"({last_label})" in m.group(2):
                    ins = Instruction(index, ins.opcode, "padding")
                instructions.append(ins)
            last_label = None
    while shown and not shown[-1].strip():
        shown.pop()
    return Listing("sass", function, shown, instructions)


# --------------------------------------------------------------------------- summary counts

@dataclass(frozen=True)
class InstructionMix:
    counts: dict[str, int]  # category -> count (every category, zeros included)
    global_loads: dict[int, int]  # width in bits -> count
    global_stores: dict[int, int]
    readonly_global_loads: int
    async_global_loads: int
    total: int


def instruction_mix(listing: Listing) -> InstructionMix:
    counted = [ins for ins in listing.instructions if ins.category != "padding"]
    counts = Counter(ins.category for ins in counted)
    loads = Counter(ins.width_bits for ins in counted if ins.category == "global_load" and ins.width_bits)
    stores = Counter(ins.width_bits for ins in counted if ins.category == "global_store" and ins.width_bits)
    return InstructionMix(
        counts={c: counts.get(c, 0) for c in CATEGORIES},
        global_loads=dict(sorted(loads.items(), reverse=True)),
        global_stores=dict(sorted(stores.items(), reverse=True)),
        readonly_global_loads=sum(1 for i in counted if i.category == "global_load" and i.readonly),
        async_global_loads=sum(1 for i in counted if i.category == "global_load" and i.asynchronous),
        total=len(counted),
    )
