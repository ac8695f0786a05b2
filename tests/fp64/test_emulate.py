"""gpufield.fp64.emulate(): dispatch from a crossover table, policies, bounds, mode hygiene, numerics, a solver.

The table here is a fixture (hand-written times and errors, not measurements): the tests check that the path
chosen for each call is the one the stated policy gives on that table, and that the emulated paths running on
CPU tensors (Ozaki-II torch path, emulated FFT torch path) agree with numpy float64 / exact references within the
a-priori bounds the log reports.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from gpufield.errors import InputError
from gpufield.fp64 import emulate, load_crossover_table
from gpufield.fp64.crossover import (
    build_table,
    choose,
    device_key,
    emulated_fft_bound,
    native_gemm_bound,
    ozaki_fast_bound,
)
from gpufield.fp64.workloads import blocked_cholesky_solve, newton_schulz_inverse, spd_test_matrix


def _mm(M, K, N, **paths):
    return {"op": "matmul", "M": M, "K": K, "N": N, "dtype": "float64",
            "paths": {p: {"time_s": t, "err_norm": e} for p, (t, e) in paths.items()}}


TABLE = {
    "schema": 1, "device": "fixture", "key": "fixture", "provenance": {"run": "fixture"},
    "entries": [
        # native fastest; int8_14 faster than 15 but less accurate than native; 15/16 more accurate
        _mm(32, 32, 32, native=(1e-5, 2e-16), ozaki_int8_14=(2e-5, 3e-16), ozaki_int8_15=(3e-5, 4e-17),
            ozaki_int8_16=(4e-5, 3e-17)),
        # Ozaki 15 faster than native and as accurate: speed picks it
        _mm(64, 64, 64, native=(5e-5, 2e-16), ozaki_int8_15=(4e-5, 2e-16), ozaki_int8_16=(6e-5, 1e-17),
            ozaki_int8_12=(1e-5, 1e-13)),
        # emulation less accurate everywhere: accuracy keeps native
        _mm(64, 16, 64, native=(1e-5, 1e-17), ozaki_int8_14=(2e-5, 5e-17)),
        {"op": "fftn", "shape": [8, 8, 8], "dtype": "complex128",
         "paths": {"native": {"time_s": 1e-5, "err_rel_l2": 3e-16},
                   "emulated_fft": {"time_s": 1e-4, "err_rel_l2": 1e-16,
                                    "plan": {"backend": "int8", "variant": "kulisch", "epilogue": "triton",
                                             "input_bits": 58, "twiddle_bits": 56}}}},
    ],
}


def _rand(*shape, seed=0):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def test_choose_policies_on_fixture():
    assert choose(TABLE, "matmul", [32, 32, 32], policy="speed").path == "native"
    assert choose(TABLE, "matmul", [64, 64, 64], policy="speed").path == "ozaki_int8_15"
    # accuracy: most accurate; 15 (4e-17) and 16 (3e-17) are within 2x: the faster one (15)
    assert choose(TABLE, "matmul", [32, 32, 32], policy="accuracy").path == "ozaki_int8_15"
    assert choose(TABLE, "matmul", [64, 64, 64], policy="accuracy").path == "ozaki_int8_16"
    c = choose(TABLE, "matmul", [64, 16, 64], policy="accuracy")
    assert c.path == "native" and "no emulated path" in c.reason
    assert choose(TABLE, "fftn", [8, 8, 8], policy="speed").path == "native"
    assert choose(TABLE, "fftn", [8, 8, 8], policy="accuracy").path == "emulated_fft"
    # nearest entry within 3 binades; far shapes and other ranks run native
    assert choose(TABLE, "matmul", [60, 64, 70], policy="speed").path == "ozaki_int8_15"
    far = choose(TABLE, "matmul", [4096, 4096, 4096])
    assert far.path == "native" and "binades away" in far.reason
    assert choose(TABLE, "fftn", [8, 8]).path == "native"
    # unavailable paths are not eligible
    assert choose(TABLE, "matmul", [64, 64, 64], available=frozenset({"native"})).path == "native"


def test_speed_with_tolerance_uses_a_priori_bounds():
    K = 64
    # bounds computed here independently of the module: gamma_K and the fast-mode formula's leading term
    u = 2.0**-53
    assert native_gemm_bound(K) == pytest.approx(K * u / (1 - K * u), rel=1e-15)
    b12, b15 = ozaki_fast_bound("int8", 12, K), ozaki_fast_bound("int8", 15, K)
    assert b15 < native_gemm_bound(K) < b12  # 12 moduli: ~2^-46 scale; 15: ~2^-58
    # tol between native's bound and 12-moduli's: 12 (the fastest) is excluded, 15 is faster than native
    c = choose(TABLE, "matmul", [64, 64, 64], policy="speed", tol=1e-14)
    assert c.path == "ozaki_int8_15" and "a-priori bound" in c.reason
    # a loose tol admits 12 moduli, the fastest
    assert choose(TABLE, "matmul", [64, 64, 64], policy="speed", tol=1e-9).path == "ozaki_int8_12"
    # nothing meets an impossible tol: the smallest bound (16 moduli) with the reason saying so
    c = choose(TABLE, "matmul", [64, 64, 64], policy="speed", tol=1e-30)
    assert c.path == "ozaki_int8_16" and "no path" in c.reason
    with pytest.raises(InputError):
        choose(TABLE, "matmul", [64, 64, 64], policy="fastest")


def test_dispatch_log_matches_table_and_numerics_within_bound():
    A, B = _rand(64, 64, seed=1), _rand(64, 64, seed=2)
    ref = A.numpy().astype(np.longdouble) @ B.numpy().astype(np.longdouble)
    nrm = np.linalg.norm(A.numpy(), axis=1)[:, None] * np.linalg.norm(B.numpy(), axis=0)[None, :]
    for policy in ("speed", "accuracy"):
        with emulate(policy, table=TABLE, allow_cpu=True, error_bound=True) as em:
            C1 = A @ B
            C2 = torch.matmul(A, B)
            C3 = torch.mm(A, B)
        want = choose(TABLE, "matmul", [64, 64, 64], policy=policy).path
        assert [r.path for r in em.log] == [want] * 3
        assert all(r.entry_dims == [64, 64, 64] and r.bound is not None for r in em.log)
        for C, r in zip((C1, C2, C3), em.log, strict=True):
            err = float(np.max(np.abs(C.numpy().astype(np.longdouble) - ref) / nrm))
            assert err <= r.bound
        assert torch.equal(C1, C2) and torch.equal(C2, C3)
    R = _rand(64, 16, seed=15)  # the reflected product logs its operands in product order
    with emulate("speed", table=TABLE, allow_cpu=True) as em:
        D = R.__rmatmul__(A)  # = A @ R: [64, 64] @ [64, 16]
    assert em.log[0].func == "@ (reflected)" and em.log[0].shapes == [[64, 64], [64, 16]]
    assert em.log[0].path == "ozaki_int8_15" and em.log[0].entry_dims == [64, 64, 64]  # 2 binades from [64, 64, 16]
    assert float((D - A @ R).abs().max()) < 1e-13


def test_batched_and_vector_operands():
    A3, B3 = _rand(3, 32, 32, seed=12), _rand(3, 32, 32, seed=13)
    v = _rand(32, seed=14)
    with emulate("accuracy", table=TABLE, allow_cpu=True, error_bound=True) as em:
        C = torch.bmm(A3, B3)
        Cb = A3 @ B3[0]  # broadcast batch
        y = A3[0] @ v  # matrix-vector: [32, 32, 1], 5 binades from the 32^3 entry: native
    assert [r.path for r in em.log] == ["ozaki_int8_15", "ozaki_int8_15", "native"]
    assert C.shape == (3, 32, 32) and Cb.shape == (3, 32, 32) and y.shape == (32,)
    bound = em.log[0].bound
    for X, R in ((C, A3 @ B3), (Cb, A3 @ B3[0])):
        nrm = torch.linalg.vector_norm(A3, dim=-1)[..., :, None] * torch.linalg.vector_norm(B3 if X is C else B3[0],
                                                                                           dim=-2)[..., None, :]
        assert float(((X - R).abs() / nrm).max()) <= bound + native_gemm_bound(32)
    assert torch.equal(y, A3[0] @ v)


def test_ozaki_path_matches_exact_product():
    """ozaki_int8_15 under emulate() vs the exact rational product: error within the logged bound."""
    A = _rand(32, 32, seed=3) * torch.exp(2 * _rand(32, 32, seed=4))  # wide exponent range
    B = _rand(32, 32, seed=5)
    with emulate("accuracy", table=TABLE, allow_cpu=True, error_bound=True) as em:
        C = A @ B
    assert em.log[0].path == "ozaki_int8_15"
    a, b = A.tolist(), B.tolist()
    worst = 0.0
    for i in range(0, 32, 5):
        na = math.sqrt(sum(x * x for x in a[i]))
        for j in range(0, 32, 7):
            exact = sum(Fraction(a[i][k]) * Fraction(b[k][j]) for k in range(32))
            nb = math.sqrt(sum(b[k][j] ** 2 for k in range(32)))
            worst = max(worst, abs(float(Fraction(float(C[i, j])) - exact)) / (na * nb))
    assert worst <= em.log[0].bound
    assert worst < 1e-16  # and far below native's gamma_32 = 3.6e-15


def test_untouched_calls_and_reasons():
    A32 = torch.randn(16, 16)
    Z = torch.randn(16, 16, dtype=torch.complex128)
    X = _rand(16, 16)
    with emulate(table=TABLE, allow_cpu=True) as em:
        r32 = A32 @ A32
        rz = Z @ Z
        X.requires_grad_(True)
        y = (X @ X).sum()
    assert torch.equal(r32, A32 @ A32) and torch.equal(rz, Z @ Z)
    assert len(em.log) == 1 and em.log[0].path == "native" and "autograd" in em.log[0].reason
    y.backward()
    assert X.grad is not None
    # without allow_cpu (and without a table) CPU float64 runs native, reason logged
    with emulate() as em2:
        Y = _rand(8, 8)
        Y @ Y
        torch.fft.fftn(torch.randn(4, 4, 4, dtype=torch.complex128))
    assert [r.path for r in em2.log] == ["native", "native"]
    assert all("cpu tensor" in r.reason for r in em2.log)


def test_nested_modes_and_exception_restores_stack():
    A, B = _rand(32, 32, seed=6), _rand(32, 32, seed=7)
    base = torch._C._len_torch_function_stack()
    with emulate("speed", table=TABLE, allow_cpu=True) as outer:
        with emulate("accuracy", table=TABLE, allow_cpu=True) as inner:
            A @ B  # inner decides once; its Ozaki internals do not reach the outer mode
        A @ B
    assert [r.path for r in inner.log] == ["ozaki_int8_15"]
    assert [r.path for r in outer.log] == ["native"]
    with pytest.raises(RuntimeError, match="boom"):
        with emulate(table=TABLE, allow_cpu=True):
            raise RuntimeError("boom")
    assert torch._C._len_torch_function_stack() == base
    with pytest.raises(InputError):
        emulate("fast")
    with pytest.raises(InputError):
        emulate(allow_cpu=True)  # a CPU has no table
    with pytest.raises(InputError):
        emulate(tol=-1.0, table=TABLE)


def test_fft_emulated_path_vs_numpy_within_bound():
    g = np.random.default_rng(0)
    x = g.standard_normal((8, 8, 8)) + 1j * g.standard_normal((8, 8, 8))
    t = torch.from_numpy(x)
    with emulate("accuracy", table=TABLE, allow_cpu=True, error_bound=True) as em:
        y = torch.fft.fftn(t)
        torch.fft.fftn(t, norm="ortho")  # not handled: non-default norm
    assert [r.path for r in em.log] == ["emulated_fft", "native"]
    ref = np.fft.fftn(x)  # numpy float64 FFT (its own error ~1e-16 is below the bound by ~10x)
    rel = np.linalg.norm(y.numpy() - ref) / np.linalg.norm(ref)
    assert em.log[0].bound == pytest.approx(emulated_fft_bound((8, 8, 8)))
    assert rel <= em.log[0].bound + 4e-16
    # Inf in the input: the emulated FFT refuses it; the call falls back to native (torch's own result)
    t[0, 0, 0] = complex("inf")
    with emulate("accuracy", table=TABLE, allow_cpu=True) as em:
        y = torch.fft.fftn(t)
    assert em.log[0].path == "native" and em.log[0].reason.startswith("fallback: emulated_fft raised NumericsError")
    assert torch.equal(torch.isnan(y), torch.isnan(torch.fft.fftn(t)))


def test_blocked_cholesky_runs_unchanged_under_emulate():
    n, nb, kappa = 192, 64, 100.0
    A = spd_test_matrix(n, kappa, seed=1)
    x_true = _rand(n, seed=9)
    b = A @ x_true
    x_plain = blocked_cholesky_solve(A, b, nb)
    table = {**TABLE, "entries": TABLE["entries"] + [
        _mm(128, 64, 128, native=(1e-4, 1e-16), ozaki_int8_15=(2e-4, 3e-17)),
        _mm(64, 64, 64, native=(5e-5, 2e-16), ozaki_int8_15=(4e-5, 2e-16), ozaki_int8_16=(6e-5, 1e-17))]}
    table["entries"] = [e for i, e in enumerate(table["entries"]) if i != 1]  # the replaced 64^3 entry
    with emulate("accuracy", table=table, allow_cpu=True, error_bound=True) as em:
        x_emu = blocked_cholesky_solve(A, b, nb)
    dims = [[s[0][0], s[0][1], s[1][1]] for s in (r.shapes for r in em.log)]
    assert dims == [[128, 64, 128], [64, 64, 64]]  # the two trailing updates of n = 192, nb = 64
    assert [r.path for r in em.log] == [choose(table, "matmul", d, policy="accuracy").path for d in dims]
    assert [r.path for r in em.log] == ["ozaki_int8_15", "ozaki_int8_16"]
    # first-order perturbation bound: each update perturbs A by <= beta ||l_i|| ||l_j|| <= beta ||A||_2
    # entrywise, so ||dA||_2 <= n (n / nb) beta ||A||_2; forward error <= kappa (that + the native parts)
    beta = max(r.bound for r in em.log)
    fwd = float(torch.linalg.vector_norm(x_emu - x_true) / torch.linalg.vector_norm(x_true))
    fwd_plain = float(torch.linalg.vector_norm(x_plain - x_true) / torch.linalg.vector_norm(x_true))
    assert fwd <= kappa * (n * (n / nb) * beta + 10 * n * 2.0**-53)
    assert fwd <= 4 * fwd_plain + 1e-14  # and about as accurate as the plain run


def test_newton_schulz_path_log():
    A = spd_test_matrix(32, 2.0, seed=2)
    with emulate("accuracy", table=TABLE, allow_cpu=True) as em:
        X = newton_schulz_inverse(A, iters=14)
    assert len(em.log) == 28 and {r.path for r in em.log} == {"ozaki_int8_15"}
    assert {tuple(r.entry_dims) for r in em.log} == {(32, 32, 32)}
    assert float((X @ A - torch.eye(32, dtype=torch.float64)).abs().max()) < 1e-13


def test_build_table_and_device_key(tmp_path):
    raw = {"env": {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "cuda": "13.0"},
           "cases": [{"op": "matmul", "M": 8, "K": 8, "N": 8, "path": "native", "time_s": 1e-5, "err_norm": 1e-16,
                      "all_finite": True},
                     {"op": "matmul", "M": 8, "K": 8, "N": 8, "path": "ozaki_int8_15", "skipped": "budget"},
                     {"op": "matmul", "M": 8, "K": 8, "N": 8, "path": "ozaki_int8_14", "time_s": 1.0,
                      "err_norm": 1e-16, "all_finite": False},
                     {"op": "fftn", "shape": [4, 4, 4], "path": "native", "time_s": 1e-5, "err_rel_l2": 1e-16,
                      "all_finite": True}],
           "cublas_emu": {"torch_handle_probe": {"reading": "x"}, "stderr_tail": "noise"}}
    t = build_table(raw, {"run": "r", "commit": "c", "date": "d", "command": "cmd"})
    assert t["key"] == "h200" and len(t["entries"]) == 2
    assert list(t["entries"][0]["paths"]) == ["native"]  # skipped and non-finite cases are not entries
    assert "stderr_tail" not in t["cublas_emu"]
    p = tmp_path / "t.json"
    import json

    p.write_text(json.dumps(t))
    assert load_crossover_table(path=p)["provenance"]["run"] == "r"
    p.write_text(json.dumps({"schema": 1}))
    with pytest.raises(InputError, match="lacks"):
        load_crossover_table(path=p)
    assert device_key("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    assert load_crossover_table("NVIDIA Imaginary X1") is None
    p.write_text(json.dumps(TABLE))
    A = _rand(32, 32, seed=11)
    with emulate("accuracy", table=str(p), allow_cpu=True) as em:  # a table given as a file path
        A @ A
    assert em.log[0].path == "ozaki_int8_15"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA refusal")
def test_cublas_emulation_refused_without_cuda():
    from gpufield.fp64.cublas_emu import CublasUnavailable, cublas_emulated_gemm

    with pytest.raises(CublasUnavailable, match="no CUDA"):
        cublas_emulated_gemm(0)


def test_cli_crossover(tmp_path, capsys):
    import json

    from gpufield.cli import main

    p = tmp_path / "t.json"
    p.write_text(json.dumps(TABLE))
    assert main(["fp64", "crossover", "--table", str(p), "--op", "matmul", "--shape", "64,64,64", "--tol", "1e-9",
                 "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["choices"]
    assert [(c["policy"], c["path"]) for c in got] == [("speed", "ozaki_int8_15"), ("accuracy", "ozaki_int8_16"),
                                                       ("speed", "ozaki_int8_12")]
    assert got[2]["bound"] == pytest.approx(ozaki_fast_bound("int8", 12, 64))
    assert main(["fp64", "crossover", "--table", str(p)]) == 0
    assert "ozaki_int8_15" in capsys.readouterr().out
    assert main(["fp64", "crossover", "--gpu", "NVIDIA Imaginary X1"]) == 2
    assert "h200" in capsys.readouterr().err  # the message lists the committed tables
    if not torch.cuda.is_available():
        assert main(["fp64", "crossover"]) == 2  # no GPU here and no --gpu
    assert main(["fp64", "crossover", "--table", str(p), "--op", "matmul", "--shape", "3,3"]) == 2


def test_committed_h200_table_is_the_run72_output():
    """data/crossover_h200.json is build_table() of the committed raw run-72 output, nothing edited by hand."""
    import json
    from pathlib import Path

    raw = Path(__file__).resolve().parents[2] / "benchmarks/results/h200-run72/fp64-emulate/fp64_crossover.json"
    t = load_crossover_table("NVIDIA H200")
    assert t is not None and t["provenance"]["run"] == "h200-run72"
    rebuilt = build_table(json.loads(raw.read_text()), t["provenance"])
    assert rebuilt["entries"] == t["entries"]
    # the two questions the table answers at 256^3 on an H200
    assert choose(t, "fftn", [256, 256, 256], policy="speed").path == "native"
    assert choose(t, "fftn", [256, 256, 256], policy="accuracy").path == "emulated_fft"


def test_cublas_emulation_can_be_left_out():
    from gpufield.fp64.emulation import _available

    x = torch.empty(0)
    cuda0 = torch.device("cuda", 0)  # only the device type is read; nothing is allocated there
    assert "cublas_emu" in _available("matmul", cuda0, x, True)
    assert "cublas_emu" not in _available("matmul", cuda0, x, False)
    assert "cublas_emu" not in _available("matmul", torch.device("cpu"), x, True)
    t = load_crossover_table("NVIDIA H200")
    assert choose(t, "matmul", [256, 256, 256], policy="accuracy").path == "cublas_emu"  # run 72: 0.43 ms
    no_cb = _available("matmul", cuda0, x, False)
    assert choose(t, "matmul", [256, 256, 256], policy="accuracy", available=no_cb).path == "ozaki_int8_15"


def test_a_priori_bounds_hold_for_every_h200_measurement():
    """Run 72's measured errors (sampled, on the H200) never exceed the a-priori bounds of their path."""
    from gpufield.fp64.crossover import path_bound

    t = load_crossover_table("NVIDIA H200")
    checked = 0
    for e in t["entries"]:
        for p, r in e["paths"].items():
            dims = {"K": e["K"]} if e["op"] == "matmul" else {"shape": e["shape"], "plan": r.get("plan")}
            b = path_bound(e["op"], p, dims)
            if b is None:
                assert p == "cublas_emu"
                continue
            err = r.get("err_norm", r.get("err_rel_l2"))
            assert err <= b, (e["op"], e.get("shape") or [e["M"], e["K"], e["N"]], p, err, b)
            checked += 1
    assert checked == 77  # every native, Ozaki-II and FFT measurement of run 72
