"""The residues of int8-crt as an INT8 product of balanced limbs (crt.cu ``crt_residues_mma``,
modelled by :mod:`gemm.ozaki.crt.limbs`): the model gives :func:`gemm.ozaki.crt.cpu.residues` byte
for byte in every form, role and moduli count, on random and adversarial operands."""

import re
from importlib import resources

import numpy as np
import pytest

from gemm.ozaki.crt import cpu, gpu, limbs, moduli, scale
from gemm.ozaki.crt.moduli import MAX_MODULI, MIN_MODULI, Moduli, family_for

FORMS = [None, "2m", "3m", "4m"]
TINY = 5e-324  # the smallest subnormal


def _exact(q, shift):
    """trunc(q 2^shift) as Python ints (float64's ldexp is exact here, trunc drops the rest)."""
    return [int(np.trunc(np.ldexp(v, int(s)))) for v, s in zip(q.ravel(), np.broadcast_to(shift, q.shape).ravel())]


def _value(lb):
    return sum(int(x) << (8 * j) for j, x in enumerate(lb))


def _adversarial(rng, lines, K, cplx):
    """Lines (1, lines, K): spread exponents, zeros, -0, one lone element, subnormals only,
    huge next to tiny, powers of two."""
    def part():
        x = rng.standard_normal((lines, K)) * np.exp2(rng.integers(-40, 40, (lines, K)))
        x[0] = 0.0
        x[1] = -0.0
        x[2] = 0.0
        x[2, K // 2] = -3.0 * 2.0 ** 900
        x[3] = TINY * rng.integers(-5, 6, K)
        x[4] = np.where(rng.random(K) < 0.5, 1e300, 1e-300) * rng.choice([-1.0, 1.0], K)
        x[5] = np.exp2(rng.integers(-1074, 1000, K).astype(float)) * rng.choice([-1.0, 1.0], K)
        x[6] = 2.0 ** -1022 * rng.standard_normal(K)  # normal and subnormal at the boundary
        return x
    X = part()
    if cplx:
        X = X + 1j * part()
    return X[None]


def test_kernel_constants_match_python():
    src = resources.files("gemm.ozaki.crt").joinpath("crt.cu").read_text()
    define = dict(re.findall(r"#define (RZ_\w+) (\d+)", src))
    assert (int(define["RZ_TL"]), int(define["RZ_TK"])) == gpu.RZ_TILE
    assert int(define["RZ_MAXCOL"]) >= 4 * MAX_MODULI  # 4m B lines: four columns a modulus
    assert limbs.ROW == 32 and limbs.MAX_LIMBS == 16  # one m16n8k32 k-step: Re's then Im's limbs


@pytest.mark.parametrize("bits", list(range(6, 127)))
def test_limb_count_is_the_least_that_holds_the_bound(bits):
    L = limbs.limb_count(bits)
    top = 127 * ((1 << (8 * L)) - 1) // 255  # the largest balanced L-limb value; the least is -top - 1
    assert (1 << bits) <= top
    assert L == 1 or (1 << bits) > 127 * ((1 << (8 * L - 8)) - 1) // 255
    lo, hi = limbs.bias(bits)
    assert lo + (hi << 64) == int.from_bytes(b"\x80" * L, "little")


def test_limb_count_beyond_the_row_raises():
    with pytest.raises(ValueError, match="127 bits need 17 limbs"):
        limbs.limb_count(127)


@pytest.mark.parametrize("bits", [6, 30, 53, 61, 62, 63, 64, 77, 79])
def test_limbs_are_balanced_and_sum_to_the_scaled_integer(rng, bits):
    """Random and boundary magnitudes (|t| = 2^bits, 2^bits - 1, 1, 0, -0, subnormals): every limb
    in [-128, 127], zero past limb_count, and sum l_j 2^(8 j) = trunc(q 2^shift)."""
    q = np.concatenate([rng.standard_normal(200), [0.0, -0.0, 1.0, -1.0, TINY, -TINY, 2.0 ** -1022, 0.75, -0.75]])
    shift = np.concatenate([rng.integers(bits - 60, bits - 1, 200), np.full(9, bits)])
    q = np.concatenate([q, [1.0, -1.0, 2.0 ** bits - 1.0 if bits <= 53 else 1.0 - 2.0 ** -53, TINY, -TINY]])
    shift = np.concatenate([shift, [bits, bits, 0 if bits <= 53 else bits, bits + 1074, bits + 1074]])
    want = _exact(q, shift)
    assert max(abs(v) for v in want) <= 2 ** bits
    got = limbs.limbs(q, shift, bits)
    L = limbs.limb_count(bits)
    assert np.all(got[:, L:] == 0)
    assert [_value(row) for row in got] == want


def test_reduce_bytes_refuses_inexact_sums():
    p = np.array([241])
    inv = np.array([moduli.recip32(241)], dtype=np.float32)
    assert limbs.reduce_bytes(np.array([2 ** 22 - 1]), p, inv).tolist() == [sym_byte(2 ** 22 - 1, 241)]
    with pytest.raises(ValueError, match="limb sums reach 4194304; the FP32 reduction needs"):
        limbs.reduce_bytes(np.array([-(2 ** 22)]), p, inv)


def sym_byte(v, p):
    r = v % p
    r = r - p if r > (p - 1) // 2 else r
    return int(np.int8(np.uint8(r & 0xFF)))


def test_reduce_bytes_matches_symmetric_residues_for_every_modulus():
    """Every modulus of both families, every v over +-2^19 (the limb sums' bound) and its edges."""
    v = np.concatenate([np.arange(-(2 ** 19), 2 ** 19 + 1, 97), np.arange(-300, 301)])
    for p in sorted(set(Moduli.first(MAX_MODULI, "general").values) | set(Moduli.first(MAX_MODULI, "split").values)):
        got = limbs.reduce_bytes(v, np.full(v.shape, p), np.full(v.shape, moduli.recip32(p), dtype=np.float32))
        want = np.array([(((x % p) - p if (x % p) > (p - 1) // 2 else x % p) & 0xFF) for x in v.tolist()],
                        dtype=np.uint8).view(np.int8)
        assert np.array_equal(got, want), p


def test_fragments_hold_the_table_in_mma_layout(rng):
    tab = rng.integers(-128, 128, (34, limbs.ROW)).astype(np.int8)
    fr = limbs.fragments(tab)
    assert fr.shape == (5, 32, 2) and fr.dtype == np.uint32
    back = np.zeros((40, limbs.ROW), dtype=np.int8)
    for nt in range(5):
        for lane in range(32):
            g, t = divmod(lane, 4)
            back[8 * nt + g, 4 * t:4 * t + 4] = np.frombuffer(fr[nt, lane, 0].tobytes(), dtype=np.int8)
            back[8 * nt + g, 16 + 4 * t:20 + 4 * t] = np.frombuffer(fr[nt, lane, 1].tobytes(), dtype=np.int8)
    assert np.array_equal(back[:34], tab) and not back[34:].any()


def test_table_columns_are_the_form_combinations():
    mods = Moduli.first(5, "split")
    tab = limbs.table(mods, "2m", "a").astype(np.int64)
    for i, p in enumerate(mods.values):
        s = int(mods.table[i, 3])
        for slot, ci in enumerate((s, -s)):
            for j in range(limbs.MAX_LIMBS):
                assert (int(tab[2 * i + slot, j]) - 2 ** (8 * j)) % p == 0
                assert (int(tab[2 * i + slot, 16 + j]) - ci * 2 ** (8 * j)) % p == 0
    assert np.abs(tab).max() <= 128
    with pytest.raises(ValueError, match="complex form '5m' is not valid"):
        limbs.combinations("5m", "a")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("role", ["a", "b"])
def test_model_gives_the_cpu_residues_for_every_count(rng, form, role):
    """The model's bytes equal cpu.residues for every moduli count of the form's family, on
    adversarial lines (and K = 37: no 8-byte multiple, padded rows)."""
    cplx = form is not None
    family = family_for(form)
    X = _adversarial(rng, 9, 37, cplx)
    E, _, _ = scale.line_exponents(cpu._parts(X, cplx), False)
    kdot = 2 * 37 if form == "4m" else 37
    kp = -(-kdot // 16) * 16
    for n in range(MIN_MODULI, MAX_MODULI + 1):
        mods = Moduli.first(n, family)
        bits = mods.alpha if role == "a" else mods.beta
        want = cpu.residues(np, X, E, bits, 1, 8, mods, form, role, kp)
        got = limbs.residues(X, E, bits, 1, 8, mods, form, role, kp)
        assert got.dtype == np.int8 and got.shape == want.shape
        assert np.array_equal(got, want.astype(np.int8)), (n, np.argwhere(got != want)[:4])


@pytest.mark.parametrize("form", FORMS)
def test_model_on_random_operands(rng, form):
    cplx = form is not None
    X = rng.standard_normal((2, 11, 64)) * np.exp2(rng.integers(-8, 8, (2, 11, 64)))
    if cplx:
        X = X + 1j * rng.standard_normal((2, 11, 64))
    E, _, _ = scale.line_exponents(cpu._parts(X, cplx), False)
    mods = Moduli.first(17, family_for(form))
    kp = 2 * 64 if form == "4m" else 64
    for role, bits in (("a", mods.alpha), ("b", mods.beta)):
        want = cpu.residues(np, X, E, bits, 0, 22, mods, form, role, kp)
        assert np.array_equal(limbs.residues(X, E, bits, 0, 22, mods, form, role, kp), want.astype(np.int8))


def test_gpu_residues_checks_its_kernel_before_any_work():
    with pytest.raises(ValueError, match="residue kernel 'int4' is not valid; expected one of fp32, mma"):
        gpu.residues(None, None, None, 53, 0, 1, Moduli.first(3, "general"), None, "a", 16, kernel="int4")
    with pytest.raises(ValueError, match="residue lines must be multiples of 8 bytes, got 12"):
        gpu.residues(None, None, None, 53, 0, 1, Moduli.first(3, "general"), None, "a", 12, kernel="mma")
    assert gpu.RESIDUES in gpu.RESIDUE_KERNELS
