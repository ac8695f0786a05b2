"""Kernel choice as typed data (issue 30): :class:`KernelConfig` on the plan and the dispatch table.

The digests in tests/fp64/data/house_digests.json were taken on main 5d571fc, before the change, with the
kernel variants chosen by the eight GPUFIELD_* environment variables (``tools/fp64_house_digests.py --mode
env``, CPU, Triton interpreter, 16 x 32 seeded input); here the same variants are chosen by KernelConfig
fields and must give the same bits. Also: no environment read in src/gpufield/fp64 chooses a kernel (AST),
importing gpufield.fp64 leaves os.environ unchanged (a fresh interpreter), one set of backend names, and the
dispatch table names the stage path.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():  # before the first import of triton in this process
    os.environ.setdefault("TRITON_INTERPRET", "1")

from gpufield.errors import InputError  # noqa: E402
from gpufield.fp64.fft import EmulatedFftPlan  # noqa: E402
from gpufield.fp64.fft.kernel_config import STAGE_PATHS, KernelConfig, stage_path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FP64 = ROOT / "src" / "gpufield" / "fp64"
sys.path.insert(0, str(ROOT / "tools"))


def test_every_former_env_variant_through_the_config_gives_the_old_bits():
    """Each case of tools/fp64_house_digests.py (default, cpu-exact/torch, and the 8 former variables, on the
    fused_epi and the triton-GEMM paths) run with its KernelConfig: the digest taken on the old env path."""
    pytest.importorskip("triton")
    from fp64_house_digests import CASES, SHAPE, run

    stored = json.loads((ROOT / "tests/fp64/data/house_digests.json").read_text())
    assert stored["mode"] == "env" and tuple(stored["shape"]) == SHAPE and set(stored["digests"]) == set(CASES)
    got = run("config", list(CASES), device="cuda" if torch.cuda.is_available() else "cpu")
    assert got == stored["digests"]


def test_config_fields_are_validated_by_name():
    assert KernelConfig() == KernelConfig(implementation="gluon", fold=None, epilogue="int32")
    for kw, msg in (({"implementation": "cuda"}, "implementation must be one of"),
                    ({"fold": "f32"}, "fold must be None or one of"),
                    ({"epilogue": "int16"}, "epilogue must be one of"),
                    ({"epilogue_asm": 0}, "epilogue_asm must be a bool"),
                    ({"max_nreg": 300}, r"max_nreg must be 0 \(no cap\) or in \[24, 255\]"),
                    ({"max_nreg": True}, "max_nreg must be None or a non-negative integer"),
                    ({"residue_pairs": -1}, "residue_pairs must be None or a non-negative integer"),
                    ({"launch": (64,)}, "launch must be 2 to 4"),
                    ({"launch": (64, 8, 16, 3)}, "passes must be 1 or 2")):
        with pytest.raises(InputError, match=msg):
            KernelConfig(**kw)
    with pytest.raises(InputError, match="kernels must be a KernelConfig"):
        EmulatedFftPlan(kernels={"implementation": "triton"})
    cfg = KernelConfig(launch=[64, 8])
    assert cfg.launch == (64, 8) and hash(cfg) == hash(KernelConfig(launch=(64, 8)))  # frozen, hashable


def _environ_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, key) of every os.environ / os.getenv access whose key is a constant, or '?' when not."""
    out = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            env_get = (f.attr in ("get", "setdefault", "pop") and isinstance(f.value, ast.Attribute)
                       and f.value.attr == "environ")
            if env_get or f.attr == "getenv":
                key = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else "?"
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "environ":
            key = node.slice.value if isinstance(node.slice, ast.Constant) else "?"
        elif isinstance(node, ast.Compare) and any(isinstance(c, ast.Attribute) and c.attr == "environ"
                                                   for c in node.comparators):
            key = node.left.value if isinstance(node.left, ast.Constant) else "?"
        if key is not None:
            out.append((node.lineno, key))
    return out


def test_no_environment_variable_chooses_a_kernel():
    """The only environment variable src/gpufield/fp64 reads is Triton's own TRITON_INTERPRET (the interpreter
    switch of gpufield.fp64.kernels, not a kernel choice); no GPUFIELD_* name appears in its code."""
    reads = {}
    for p in FP64.rglob("*.py"):
        src = p.read_text()
        for line, key in _environ_reads(ast.parse(src)):
            reads.setdefault(key, []).append(f"{p.relative_to(FP64)}:{line}")
        code = "\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith("#"))
        tree_strings = [n.value for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Constant)
                        and isinstance(n.value, str) and n.value.startswith("GPUFIELD_")]
        assert not tree_strings, (p, tree_strings)
    assert set(reads) == {"TRITON_INTERPRET"}, reads
    assert all(w.startswith("kernels/__init__.py") for w in reads["TRITON_INTERPRET"]), reads
    # the AST walker sees what it is meant to (an independent check of the helper on known code)
    assert [k for _, k in _environ_reads(ast.parse("import os\nos.environ.get('A')\nos.getenv('B')\n"
                                                   "os.environ['C']\n'D' in os.environ\n"))] == ["A", "B", "C", "D"]


def test_import_leaves_the_process_environment_unchanged():
    """A fresh interpreter without TRITON_INTERPRET: os.environ is the same dict before and after importing
    gpufield.fp64 and every module of its fft and kernels packages."""
    code = ("import os, json, pkgutil, importlib; before = dict(os.environ); import gpufield.fp64, "
            "gpufield.fp64.fft, gpufield.fp64.kernels\n"
            "for pkg in (gpufield.fp64.fft, gpufield.fp64.kernels):\n"
            "    for m in pkgutil.iter_modules(pkg.__path__):\n"
            "        if m.name != 'gemm_fused_gluon': importlib.import_module(pkg.__name__ + '.' + m.name)\n"
            "print(json.dumps(dict(os.environ) == before))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *sys.path])
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-1] == "true"


def test_one_set_of_backend_names_and_backend_objects():
    """The FFT takes ozaki_matmul's names and ModularBackend objects; the old name 'cpu' is refused naming the
    new one; a backend object's stages give the name's bits."""
    from gpufield.fp64.fft import fftn_fp64_emulated
    from gpufield.fp64.fft.plan import BACKENDS as FFT_BACKENDS
    from gpufield.fp64.ozaki.backends import BACKENDS, CpuExactBackend

    assert set(FFT_BACKENDS) == set(BACKENDS)
    with pytest.raises(InputError, match="'cpu' is now 'cpu-exact'"):
        EmulatedFftPlan(backend="cpu")
    with pytest.raises(InputError, match="ModularBackend"):
        EmulatedFftPlan(backend=object())
    obj = EmulatedFftPlan(backend=CpuExactBackend("int8"))
    assert obj.backend_name == "cpu-exact" and obj.modular_backend() is obj.backend
    assert isinstance(EmulatedFftPlan(backend="int8").modular_backend(), BACKENDS["int8"])
    x = torch.randn(8, 16, dtype=torch.complex128)
    assert torch.equal(fftn_fp64_emulated(x, obj), fftn_fp64_emulated(x, EmulatedFftPlan(backend="cpu-exact")))


def test_dispatch_table_names_the_stage_path():
    """256^3 on an H200 (sm_90): the Gluon fused kernel with the FP64 fold; other GPUs and the interpreter: the
    Triton fused kernel with the integer fold; a thin stage on CUDA: cuBLAS; torch plans: the torch path."""
    h200 = EmulatedFftPlan(backend="int8", epilogue="triton")
    assert h200.stage_path((9, 0)).startswith("fused_epi_gluon") and h200.stage_path((9, 0)).endswith("fold f64")
    assert stage_path(h200, (10, 0)).startswith("fused_epi_triton") and stage_path(h200, (10, 0)).endswith("fold int")
    assert "interpreter" in stage_path(h200, None)
    assert stage_path(h200, (9, 0), rows_per_group=1).startswith("cublas")
    assert stage_path(h200, None, rows_per_group=1).startswith("fused_epi_triton")  # the R < 16 rule is CUDA's
    tri = EmulatedFftPlan(backend="int8", epilogue="triton", kernels=KernelConfig(implementation="triton"))
    assert stage_path(tri, (9, 0)).startswith("fused_epi_triton")
    assert stage_path(EmulatedFftPlan(), None).startswith("torch")
    assert stage_path(EmulatedFftPlan(backend="int8", epilogue="triton", variant="garner"), (9, 0)).startswith(
        "triton_gemm")
    # the table is total over its keys: every gemm x implementation x device finds a row
    for gemm in ("fused_epi", "fused", "triton", "cublas"):
        for impl in ("gluon", "triton"):
            for cap in ((9, 0), (8, 0), None):
                plan = EmulatedFftPlan(backend="int8", epilogue="triton", int8_gemm=gemm,
                                       kernels=KernelConfig(implementation=impl))
                assert any(stage_path(plan, cap).startswith(row[3].split(";")[0][:12]) for row in STAGE_PATHS)


def test_each_config_field_reaches_its_kernel(monkeypatch):
    """Same bits alone cannot show that a field is used: spies on the launchers record the choice each field
    makes (epilogue kernel, fused implementation, fold, pairs) on a small 2-D transform."""
    pytest.importorskip("triton")
    import gpufield.fp64.fft.gemm_fused_epi as fe
    import gpufield.fp64.kernels.fft_epilogue as fep
    from gpufield.fp64.fft import fftn_fp64_emulated

    seen: dict[str, list] = {"impl": [], "fold": [], "pairs": [], "epi64": []}

    def spy(module, attr, name, record):
        fn = getattr(module, attr)

        def wrapped(*a, **k):
            seen[name].append(record(*a, **k))
            return fn(*a, **k)
        monkeypatch.setattr(module, attr, wrapped)  # the name the caller looks up at call time

    spy(fe, "_resolve_impl", "impl", lambda impl: impl)
    spy(fe, "_fold_constants", "fold", lambda tab, variant, fold, gluon: fold)
    spy(fe, "residue_schedule", "pairs", lambda moduli, pairs, strict=True: pairs)
    spy(fep.fft_epilogue_int64, "epilogue_triton", "epi64", lambda *a, **k: True)
    x = torch.randn(16, 16, dtype=torch.complex128)
    run = lambda gemm, **kc: fftn_fp64_emulated(x, EmulatedFftPlan(  # noqa: E731
        backend="int8", epilogue="triton", int8_gemm=gemm, kernels=KernelConfig(**kc)))
    run("fused_epi", implementation="triton", fold="int", residue_pairs=2)
    assert set(seen["impl"]) == {"triton"} and set(seen["fold"]) == {"int"} and 2 in seen["pairs"]
    assert not seen["epi64"]
    run("triton", epilogue="int64")
    assert seen["epi64"]
    with pytest.raises(TypeError):  # the int64 residue kernel left the library (benchmarks/fp64_residue_int64.py)
        KernelConfig(residue="int64")


def test_cli_kernels_answers_which_kernel_runs(capsys):
    """`gpufield fp64 kernels`: 256^3 on an H200 runs six Gluon fused stages (length 16; 16 groups of 65536
    rows in stage 2); a 1-D 1024 transform's stage 2 (one row per group) runs cuBLAS; a bad device is named."""
    from gpufield.cli import main

    assert main(["fp64", "kernels", "--shape", "256,256,256", "--device", "h200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["stages"]) == 6 and all(s["path"].startswith("fused_epi_gluon") for s in out["stages"])
    assert [(s["length"], s["groups"], s["rows_per_group"]) for s in out["stages"][:2]] == [(16, 1, 2**20),
                                                                                          (16, 16, 2**16)]
    assert main(["fp64", "kernels", "--shape", "1024", "--device", "9.0", "--json"]) == 0
    st = json.loads(capsys.readouterr().out)["stages"]
    assert [s["path"].split(":")[0] for s in st] == ["fused_epi_gluon", "cublas"]
    assert main(["fp64", "kernels", "--device", "h2oo"]) != 0
    assert "device 'h2oo'" in capsys.readouterr().err


def test_kernels_import_nothing_from_fft():
    """One direction only: gpufield.fp64.fft imports the kernels, no module of gpufield.fp64.kernels imports
    gpufield.fp64.fft (the shared CRT tables are gpufield.fp64.crt_tables)."""
    bad = []
    for p in (FP64 / "kernels").glob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            mods = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad += [f"{p.name}:{node.lineno} {m}" for m in mods if m.startswith("gpufield.fp64.fft")]
    assert not bad, bad
