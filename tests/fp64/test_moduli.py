"""Moduli tables and CRT constants of Ozaki-II (gpufield.fp64.ozaki.moduli) against exact integer arithmetic."""

from __future__ import annotations

import json
import math
import random

import pytest

from gpufield.errors import InputError, NumericsError
from gpufield.fp64.ozaki import moduli as mod
from gpufield.fp64.ozaki.moduli import crt_lift, moduli_table, sym_mod

# log2 M from the reference notes (fp64.md 2.2 / 6), computed there independently.
REF_LOG2M = {("int8", 2): 15.99, ("int8", 8): 63.58, ("int8", 14): 110.16, ("int8", 16): 125.38,
             ("int8", 20): 155.37, ("fp8", 2): 20.09, ("fp8", 13): 120.75, ("fp8", 16): 147.38,
             ("fp8", 20): 182.66}


def test_tables_match_reference_and_are_coprime():
    assert mod.RAW_MODULI["int8"][:4] == (256, 255, 253, 251)
    assert mod.RAW_MODULI["fp8"][:7] == (1089, 1024, 961, 841, 625, 529, 511)
    for kind in ("int8", "fp8"):
        ps = mod.RAW_MODULI[kind]
        assert len(ps) == 20
        for i in range(20):
            for j in range(i):
                assert math.gcd(ps[i], ps[j]) == 1


@pytest.mark.parametrize("key", sorted(REF_LOG2M))
def test_log2M_matches_reference_notes(key):
    t = moduli_table(*key)
    assert abs(t.log2_M - REF_LOG2M[key]) < 0.006
    assert 2.0 ** t.log2_half_M_floor <= (t.M - 1) // 2


@pytest.mark.parametrize("kind", ["int8", "fp8"])
@pytest.mark.parametrize("n", [2, 7, 13, 16, 17, 20])
def test_crt_constants_are_delta(kind, n):
    t = moduli_table(kind, n)
    for mi, C in enumerate(t.crt_C):
        for j, p in enumerate(t.moduli):
            assert C % p == (1 if mi == j else 0)
        assert sum(limb << (31 * k) for k, limb in enumerate(t.C_limbs_LJ[mi])) == C
    assert sum(limb << (31 * k) for k, limb in enumerate(t.M_limbs_J)) == t.M
    # 128-bit overflow regression (eshkol#307): 17+ moduli exceed a signed int128, Python ints do not.
    assert t.M == math.prod(t.moduli) > 0


@pytest.mark.parametrize("kind", ["int8", "fp8"])
def test_crt_lift_round_trip(kind):
    rng = random.Random(7)
    for n in (2, 5, 14, 17, 20):
        t = moduli_table(kind, n)
        for _ in range(200):
            X = rng.randrange(-(t.M // 2), (t.M + 1) // 2)
            assert crt_lift([sym_mod(X, p) for p in t.moduli], t) == X
            assert crt_lift([X % p + 3 * p for p in t.moduli], t) == X


def test_sym_mod_range():
    for p in (256, 255, 1089, 1024, 443):
        rs = {sym_mod(x, p) for x in range(-3 * p, 3 * p)}
        assert rs == set(range(-(p // 2), (p + 1) // 2))


def test_fp8_square_moduli():
    t = moduli_table("fp8", 8)
    assert t.num_square == 6
    assert [t.square_root(mi) for mi in range(8)] == [33, 32, 31, 29, 25, 23, None, None]


def test_bad_arguments():
    with pytest.raises(InputError):
        moduli_table("int4", 4)
    with pytest.raises(InputError):
        moduli_table("int8", 21)
    with pytest.raises(InputError):
        moduli_table("int8", 1)


def test_non_coprime_table_rejected():
    with pytest.raises(NumericsError, match="not coprime"):
        mod._check_table("int8", [256, 255, 250])


def test_data_file_names_its_source():
    from importlib import resources

    raw = json.loads(resources.files("gpufield.fp64").joinpath("data/moduli.json").read_text())
    assert "GEMMul8" in raw["source"]
