"""The compile cache: keyed by source, parameters, arch and compiler; warm runs skip triton."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from profkit.ptx.cache import Cache
from profkit.ptx.compile import build
from profkit.ptx.targets import (
    CompileParams,
    parse_arch,
    parse_signature,
    resolve_target,
)

REPO = Path(__file__).resolve().parents[1]
KERNEL = (
    "import triton\nimport triton.language as tl\nfrom helpers import scale\n\n\n@triton.jit\n"
    "def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
    "    m = offs < n\n    tl.store(y_ptr + offs, scale(tl.load(x_ptr + offs, mask=m)), mask=m)\n"
)
HELPERS = "import triton\n\n\n@triton.jit\ndef scale(x):\n    return x * 2\n"


@pytest.fixture
def kernel_dir(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "kernels.py").write_text(KERNEL)
    (tmp_path / "src" / "helpers.py").write_text(HELPERS)
    return tmp_path / "src"


def target(kernel_dir: Path, block: int = 256, arch: str = "sm_90"):
    params = CompileParams(arch=parse_arch(arch), signature=parse_signature("*fp32:16,*fp32:16,i32:16"),
                           constexprs=(("BLOCK", block),))
    return resolve_target(f"{kernel_dir / 'kernels.py'}::k", params)


def test_second_build_is_a_hit_and_parameters_are_part_of_the_key(kernel_dir, tmp_path):
    cache = Cache(tmp_path / "cache")
    cold = build(target(kernel_dir), cache)
    warm = build(target(kernel_dir), cache)
    assert not cold.cached and warm.cached
    assert warm.ptx == cold.ptx and warm.cubin == cold.cubin and warm.ptxas_log == cold.ptxas_log
    assert warm.params == cold.params and warm.arch == cold.arch
    assert not build(target(kernel_dir, block=512), cache).cached
    assert not build(target(kernel_dir, arch="sm_80"), cache).cached
    assert build(target(kernel_dir, block=512), cache).cached


def test_editing_the_kernel_or_a_local_import_recompiles(kernel_dir, tmp_path):
    cache = Cache(tmp_path / "cache")
    first = build(target(kernel_dir), cache)
    (kernel_dir / "helpers.py").write_text(HELPERS.replace("x * 2", "x * 3"))
    changed = build(target(kernel_dir), cache)
    assert not changed.cached and changed.ptx != first.ptx
    assert "0f40400000" in changed.ptx  # 3.0f: the new helper was compiled
    (kernel_dir / "kernels.py").write_text(KERNEL + "\n# a comment\n")
    assert not build(target(kernel_dir), cache).cached


def test_environment_that_changes_codegen_is_part_of_the_key(kernel_dir, tmp_path, monkeypatch):
    cache = Cache(tmp_path / "cache")
    build(target(kernel_dir), cache)
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    assert not build(target(kernel_dir), cache).cached
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "elsewhere"))  # where Triton caches changes no code
    assert build(target(kernel_dir), cache).cached


def test_damaged_entries_and_disabled_cache(kernel_dir, tmp_path):
    cache = Cache(tmp_path / "cache")
    build(target(kernel_dir), cache)
    cubins = list((tmp_path / "cache").rglob("kernel.cubin"))
    assert len(cubins) == 1
    cubins[0].unlink()
    rebuilt = build(target(kernel_dir), cache)
    assert not rebuilt.cached and rebuilt.cubin.startswith(b"\x7fELF")
    assert build(target(kernel_dir), cache).cached
    assert not build(target(kernel_dir), Cache(tmp_path / "cache", enabled=False)).cached


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PROFKIT_CACHE_DIR", str(tmp_path / "pk"))
    assert Cache().root == tmp_path / "pk"
    monkeypatch.delenv("PROFKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert Cache().root == tmp_path / "xdg" / "profkit" / "ptx"


def test_warm_cli_run_does_not_import_triton(tmp_path):
    env = {**os.environ, "PROFKIT_CACHE_DIR": str(tmp_path / "cache"), "CUDA_VISIBLE_DEVICES": ""}
    code = ("import sys, json\nfrom click.testing import CliRunner\nfrom profkit.cli import cli\n"
            "r = CliRunner().invoke(cli, ['ptx', 'gelu', '--format', 'json'])\n"
            "print(json.dumps({'rc': r.exit_code, 'triton': 'triton' in sys.modules, "
            "'loads': json.loads(r.stdout)['global_loads']}))\n")
    runs = [json.loads(subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                                      text=True, check=True).stdout) for _ in range(2)]
    assert runs[0] == {"rc": 0, "triton": True, "loads": {"128": 2, "64": 0, "32": 0}}
    assert runs[1] == {"rc": 0, "triton": False, "loads": {"128": 2, "64": 0, "32": 0}}


def test_concurrent_writers_leave_one_good_entry(tmp_path):
    cache = Cache(tmp_path / "cache")
    cache.put("t", "ab" * 32, {"arch": "sm_90"}, {"a.txt": b"one"})
    cache.put("t", "ab" * 32, {"arch": "sm_90"}, {"a.txt": b"two"})  # the second writer loses quietly
    manifest, files = cache.get("t", "ab" * 32)
    assert manifest["arch"] == "sm_90" and files["a.txt"] in (b"one", b"two")
    leftovers = [p for p in (tmp_path / "cache").rglob("*") if p.name.startswith(".tmp")]
    assert leftovers == []
    shutil.rmtree(tmp_path / "cache")
    assert cache.get("t", "ab" * 32) is None
