"""PTX/SASS instruction classification and listing extraction.

The single-line cases are the spellings the compilers really emit (Triton's
predicated inline asm, nvcc's .nc loads, SASS from sm_80 to sm_100); the
listing tests run on PTX and SASS compiled in this session.
"""

from __future__ import annotations

import re
import textwrap

import pytest

from profkit.ptx import parse
from profkit.ptx.cache import Cache
from profkit.ptx.diff import normalize
from profkit.ptx.kernel import load_kernels
from profkit.ptx.targets import resolve_target


@pytest.fixture(autouse=True)
def _shared_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PROFKIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "profkit-ptx-cache"))


@pytest.mark.parametrize("line, category, width, readonly", [
    # Triton: predicated inline asm, b32 elements
    ("@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];", "global_load", 128, False),
    ("@!%p2 ld.global.L1::evict_last.v4.b32 { %r5, %r6, %r7, %r8 }, [ %rd2 + 0 ];", "global_load", 128, False),
    ("@%p1 st.global.v4.b32 [ %rd3 + 0 ], { %r9, %r10, %r11, %r12 };", "global_store", 128, False),
    ("@%p1 ld.global.b32 { %r1 }, [ %rd1 + 0 ];", "global_load", 32, False),
    ("@%p1 ld.global.v2.b32 { %r1, %r2 }, [ %rd1 + 0 ];", "global_load", 64, False),
    # nvcc: read-only path and typed vectors
    ("ld.global.nc.v4.u32 {%r1, %r2, %r3, %r4}, [%rd5];", "global_load", 128, True),
    ("ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd6];", "global_load", 128, True),
    ("ld.global.nc.f32 %f1, [%rd5];", "global_load", 32, True),
    ("st.global.v4.f32 [%rd7], {%f103, %f102, %f101, %f100};", "global_store", 128, False),
    ("st.global.f32 [%rd7], %f30;", "global_store", 32, False),
    ("ld.global.v2.f64 {%fd1, %fd2}, [%rd1];", "global_load", 128, False),
    ("ld.global.v8.f32 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, [%rd1];", "global_load", 256, False),
    ("ld.global.b128 %rq1, [%rd1];", "global_load", 128, False),
    ("ld.global.u8 %rs1, [%rd1];", "global_load", 8, False),
    # cp.async (sm_80 pipelining) carries its size as an operand
    ("cp.async.cg.shared.global [ %r1 + 0 ], [ %rd1 + 0 ], 0x10, %r2;", "global_load", 128, False),
    ("cp.async.cg.shared.global [%r1], [%rd1], 16;", "global_load", 128, False),
    ("cp.async.ca.shared.global [%r1], [%rd1], 4, %r3;", "global_load", 32, False),
])
def test_ptx_global_memory_widths(line, category, width, readonly):
    ins = parse.classify_ptx(line)
    assert ins.category == category
    assert ins.width_bits == width
    assert ins.readonly is readonly


@pytest.mark.parametrize("line, category", [
    ("ld.shared.f32 %f1, [%r1];", "shared_load"),
    ("st.shared.v4.b32 [%r1], {%r2, %r3, %r4, %r5};", "shared_store"),
    ("@%p1 st.shared.b32 [ %r1 + 0 ], %r2;", "shared_store"),
    ("ld.local.u32 %r1, [%rd1];", "local_load"),
    ("ld.param.b64 %rd5, [gelu_kernel_param_0];", "move"),
    ("atom.global.add.f32 %f1, [%rd1], %f2;", "global_atomic"),
    ("red.global.add.f32 [%rd1], %f2;", "global_atomic"),
    ("fma.rn.f32 %f5, %f1, %f4, %f1;", "fma"),
    ("mad.lo.s32 %r1, %r3, %r4, %r5;", "int"),
    ("mul.f32 %r25, %r1, 0f3D372713;", "fp"),
    ("add.s64 %rd1, %rd5, %rd7;", "int"),
    ("setp.lt.s32 %p1, %r23, %r19;", "int"),
    ("ex2.approx.ftz.f32 %f9, %f8;", "sfu"),
    ("tanh.approx.f32 %f1, %f2;", "sfu"),
    ("rcp.rn.f32 %f1, %f2;", "fp"),
    ("div.full.f32 %r1, %r2, %r3;", "fp"),
    ("@%p1 bra $L__BB0_2;", "branch"),
    ("bar.sync 0;", "barrier"),
    (("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1,%f2,%f3,%f4}, {%r1,%r2,%r3,%r4}, {%r5,%r6}, "
      "{%f5,%f6,%f7,%f8};"), "mma"),
    ("wgmma.fence.sync.aligned;", "barrier"),
    (("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r2, %r3}], "
      "[%r4];"), "tma"),
    ("cvt.rn.f16.f32 %rs1, %f1;", "convert"),
    ("shfl.sync.bfly.b32 %r1, %r2, 16, 31, -1;", "move"),
])
def test_ptx_categories(line, category):
    assert parse.classify_ptx(line).category == category


@pytest.mark.parametrize("line", [".reg .b32 %r<122>;", "$L__BB0_2:", "{", "}", "// begin inline asm", ""])
def test_ptx_non_instructions(line):
    assert parse.classify_ptx(line) is None


@pytest.mark.parametrize("text, category, width, readonly", [
    ("@!P1 LDG.E.128 R8, desc[UR4][R2.64]", "global_load", 128, False),
    ("LDG.E.128.CONSTANT R4, desc[UR4][R4.64]", "global_load", 128, True),
    ("LDG.E.CONSTANT R4, desc[UR4][R2.64]", "global_load", 32, True),
    ("LDG.E R4, [R2.64]", "global_load", 32, False),
    ("LDG.E.64 R4, desc[UR4][R2.64]", "global_load", 64, False),
    ("LDG.E.U8 R4, desc[UR4][R2.64]", "global_load", 8, False),
    ("LDG.E.ENL2.256 R4, R8, desc[UR4][R2.64]", "global_load", 256, False),
    ("LDG.E.LTC128B.128 R4, desc[UR4][R2.64]", "global_load", 128, False),
    ("LDG.E.LTC128B R4, desc[UR4][R2.64]", "global_load", 32, False),
    ("STG.E.128 desc[UR4][R2.64], R4", "global_store", 128, False),
    ("@!P1 STG.E.128 [R8.64], R4", "global_store", 128, False),
    ("STG.E desc[UR4][R2.64], R7", "global_store", 32, False),
    ("LDGSTS.E.BYPASS.LTC128B.128 [R3], desc[UR4][R4.64]", "global_load", 128, False),
])
def test_sass_global_memory_widths(text, category, width, readonly):
    ins = parse.classify_sass(text)
    assert (ins.category, ins.width_bits, ins.readonly) == (category, width, readonly)


@pytest.mark.parametrize("text, category", [
    ("MUFU.EX2 R0, R0", "sfu"), ("MUFU.TANH R1, R2", "sfu"), ("FFMA R0, R0, R11, R11", "fma"),
    ("HFMA2.MMA R13, -RZ, RZ, 1.625, 0", "fma"), ("FMUL R0, R11, 0.5", "fp"), ("FADD R0, R1, R2", "fp"),
    ("HMMA.16816.F32 R4, R8, R12, R4", "mma"), ("HGMMA.64x128x16.F32 R24, gdesc[UR4], R24", "mma"),
    ("LDS.128 R4, [R2]", "shared_load"), ("STS [R2], R4", "shared_store"), ("LDSM.16.M88.4 R4, [R2]", "shared_load"),
    ("LDL R4, [R1+0x10]", "local_load"), ("STL [R1+0x10], R4", "local_store"), ("ATOMG.E.ADD.F32 PT, R0, [R2]", "global_atomic"),
    ("RED.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR4][R2.64], R5", "global_atomic"), ("UTMALDG.2D [UR8], [UR4]", "tma"),
    ("BRA `(.L_x_3)", "branch"), ("BAR.SYNC.DEFER_BLOCKING 0x0", "barrier"), ("IMAD.WIDE R2, R15, 0x4, R2", "int"),
    ("ISETP.GE.AND P1, PT, R15, UR6, PT", "int"), ("S2R R0, SR_TID.X", "move"), ("F2FP.F16.F32.PACK_AB R0, R1, R2", "convert"),
    ("EXIT", "other"), ("NOP", "padding"),
])
def test_sass_categories(text, category):
    assert parse.classify_sass(text).category == category


def test_ptx_listing_keeps_the_entry_and_the_functions_it_calls():
    ptx = textwrap.dedent("""\
        .version 8.0
        .target sm_90
        .address_size 64
        .func (.param .b32 func_retval0) helper(
        \t.param .b32 helper_param_0
        )
        {
        \tld.global.f32 %f1, [%rd1];
        \tret;
        }
        .func unused()
        {
        \tld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];
        \tret;
        }
        .visible .entry k1(
        \t.param .u64 k1_param_0
        )
        {
        \t.loc 1 2 3
        \tcall.uni (retval0), helper, (param0);
        \tst.global.v4.f32 [%rd1], {%f1, %f2, %f3, %f4};
        \tret;
        }
        .visible .entry k2()
        {
        \tld.global.v2.f32 {%f1, %f2}, [%rd1];
        \tret;
        }
        .section .debug_info
        {
        .b8 1
        }""")
    assert parse.ptx_entries(ptx) == ["k1", "k2"]
    listing = parse.ptx_listing(ptx, "k1")
    text = listing.text
    assert "helper" in text and ".entry k1" in text
    assert "unused" not in text and ".entry k2" not in text and ".debug_info" not in text and ".loc" not in text
    mix = parse.instruction_mix(listing)
    assert mix.global_loads == {32: 1} and mix.global_stores == {128: 1}
    assert parse.ptx_listing(ptx, "k1", raw=True).lines == ptx.splitlines()


def _gelu():
    return load_kernels(resolve_target("gelu"), Cache())[0]


def test_triton_gelu_listings_from_a_real_compile():
    code = _gelu()
    ptx = code.ptx()
    assert ptx.function == "gelu_kernel"
    assert not any(line.strip().startswith(".loc") for line in ptx.lines)
    loads = [ptx.lines[i.line] for i in ptx.instructions if i.category == "global_load"]
    assert len(loads) == 2 and all("ld.global.v4.b32" in line for line in loads)
    sass = code.sass()
    sass_loads = [sass.lines[i.line] for i in sass.instructions if i.category == "global_load"]
    assert len(sass_loads) == 2 and all("LDG.E.128" in line for line in sass_loads)
    # ptxas pads every kernel with "BRA" to itself after EXIT; it is not counted as a branch
    padding = [sass.lines[i.line] for i in sass.instructions if i.category == "padding" and i.opcode == "BRA"]
    assert len(padding) == 1
    assert parse.instruction_mix(sass).counts["branch"] == 0


def test_normalization_ignores_register_and_label_renumbering():
    ptx = _gelu().ptx()
    shifted_lines = [re.sub(r"%(r|rd|p)(\d+)", lambda m: f"%{m.group(1)}{int(m.group(2)) + 500}", line)
                     for line in ptx.lines]
    shifted = parse.Listing("ptx", ptx.function, shifted_lines, [])
    assert shifted.lines != ptx.lines
    assert normalize(shifted) == normalize(ptx)
    sass = _gelu().sass()
    renamed = parse.Listing("sass", sass.function, [
        re.sub(r"\bR(\d+)\b", lambda m: f"R{(int(m.group(1)) + 7) % 200}", re.sub(r"\.L_x_(\d+)", r".L_x_9\1", line))
        for line in sass.lines], [])
    assert normalize(renamed) == normalize(sass)
    # ... while a real change is still a change
    changed = parse.Listing("ptx", ptx.function, [line.replace("ld.global.v4.b32", "ld.global.b32") for line in ptx.lines], [])
    assert normalize(changed) != normalize(ptx)
