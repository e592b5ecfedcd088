"""The CRT scheme on INT8 (method int8-crt) on the CPU: accuracy against DD and native, the exact
reconstruction, scaling, the complex forms, bad input, stacked operands and blocks."""

import math
import re
import types
from fractions import Fraction
from importlib import resources

import numpy as np
import pytest

import gemm
from gemm.diagnostics import testmats
from gemm.ozaki.crt import cpu, method, moduli, scale
from gemm.ozaki.crt.moduli import Moduli

CRT = "int8-crt"


def _mean_rel(c, a, b):
    hi, lo = gemm.matmul(a, b, method="dd", output="pair")
    return float(np.mean(np.abs((c - hi) - lo) / np.abs(hi)))


def _phi(rng, m, k, n, phi, cplx):
    gen = testmats.complex_phi_matrix if cplx else testmats.phi_matrix
    return gen(m, k, phi, rng), gen(k, n, phi, rng)


# --- options ---------------------------------------------------------------------------------


def test_registered_with_options():
    m = gemm.get_method(CRT)
    assert m.precision == "fp64"
    assert dict(m.options) == {"bits": 53, "moduli": None, "complex_form": "2m", "product_kernel": "auto"}


@pytest.mark.parametrize("opts, exc, match", [
    ({"bits": 7}, ValueError, r"option bits=7 is not valid; expected an int in 8\.\.100"),
    ({"bits": 53.0}, TypeError, r"option bits must be an int in 8\.\.100, got 53\.0 \(float\)"),
    ({"moduli": 1}, ValueError, r"option moduli=1 is not valid; expected an int in 2\.\.20 or None"),
    ({"moduli": 21}, ValueError, r"option moduli=21 is not valid; expected an int in 2\.\.20 or None"),
    ({"product_kernel": "mma"}, ValueError, r"option product_kernel='mma' is not valid"),
    ({"complex_form": "karatsuba"}, ValueError, r"option complex_form='karatsuba' is not valid; expected one of 4m, 3m, 2m"),
    ({"splits": 9}, TypeError, r"method 'int8-crt' got unknown option\(s\) splits"),
])
def test_bad_options(opts, exc, match):
    a = np.ones((2, 2))
    with pytest.raises(exc, match=match):
        gemm.matmul(a, a, method=CRT, **opts)


# --- moduli ----------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["general", "split"])
def test_moduli_pairwise_coprime_and_int8(family):
    mods = moduli.FAMILIES[family]
    assert len(mods) == moduli.MAX_MODULI and max(mods) <= 256
    assert all(math.gcd(p, q) == 1 for i, p in enumerate(mods) for q in mods[i + 1:])
    for p in mods:  # the symmetric range fits INT8
        assert -(p // 2) >= -128 and (p - 1) - p // 2 <= 127
    if family == "split":
        assert all(p % 2 == 1 and pow(moduli.sqrt_minus_one(p), 2, p) == p - 1 for p in mods)


@pytest.mark.parametrize("family", ["general", "split"])
def test_moduli_constants_and_words(family):
    m = Moduli.first(20, family)
    assert m.P == math.prod(m.values) and 2 ** m.p_bits <= m.P < 2 ** (m.p_bits + 1)
    assert 2 ** (m.alpha + m.beta) <= m.P // 4
    value = lambda words: sum(int(d) << (moduli.D * w) for w, d in enumerate(words))  # noqa: E731
    assert value(m.digits_p) == m.P and float(m.inv_P) == 1.0 / m.P
    forms = [None, "4m", "3m"] + (["2m"] if family == "split" else [])
    for form in forms:
        wts = m.weights(form)
        assert wts.shape == (2, len(m.values), m.words) and (wts >= 0).all() and (wts < 2 ** moduli.D).all()
        for part in (0, 1):
            for i, p in enumerate(m.values):
                w = value(wts[part, i])
                assert 0 <= w < m.P and all(w % q == 0 for j, q in enumerate(m.values) if j != i)
                if form != "2m":
                    assert w % p == 1  # the weight of residue i: 1 modulo p_i, 0 modulo the others
                else:  # Re = (u1 + u2) / 2 and Im = (u1 - u2) / (2 s)
                    s = moduli.sqrt_minus_one(p)
                    assert (2 * w) % p == 1 if part == 0 else (2 * s * w) % p == 1
    if family == "general":
        with pytest.raises(ValueError, match="split"):
            m.weights("2m")
    # every word sum, less q P_w, stays exact in float64 (|c_i| <= 384, |q| <= 20 * 384)
    assert 2 * len(m.values) * 384 * 2 ** moduli.D < 2 ** 52


def test_kernel_constants_match_python():
    src = resources.files("gemm.ozaki.crt").joinpath("crt.cu").read_text()
    define = dict(re.findall(r"#define (\w+) \(?(-?\(?[0-9 <-]+\)?)\)?", src))
    assert int(define["G_SHIFT"]) == scale.G and int(define["DCAP"]) == scale.DCAP
    assert int(define["D_BITS"]) == moduli.D
    assert int(define["WMAX"]) >= Moduli.first(moduli.MAX_MODULI, "general").words
    assert "(-(1 << 30))" in src and scale.ZERO_LINE == -(1 << 30)
    from gemm.ozaki.crt import gpu

    assert (int(define["RM_LIMBS"]), int(define["RM_K"]), int(define["RM_BC"])) == (
        gpu.MMA_LIMBS, gpu.MMA_K, gpu.MMA_COLUMNS)


# --- the exact parts -------------------------------------------------------------------------


@pytest.mark.parametrize("n, family", [(2, "general"), (9, "split"), (16, "general"), (20, "general"), (20, "split")])
def test_reconstruction_is_exact(rng, n, family):
    """finish() against Python integers: C' from its residues, near 0, near +-P/4 and random; and
    the same bits whichever representatives (|c_i| <= 384) of the residues come in."""
    mods = Moduli.first(n, family)
    lim = mods.P // 4
    vals = [0, 1, -1, lim, -lim, lim - 1, -lim + 1, 2 ** 53 + 1, -(2 ** 60) - 3]
    vals += [int(v) for v in rng.integers(-2 ** 62, 2 ** 62, 20)]
    vals += [int.from_bytes(rng.bytes(24), "little") % (2 * lim + 1) - lim for _ in range(40)]
    # a carry tie: C' = 2^37 (mod 2^38) leaves a balanced digit of -2^37 whichever quotient came
    vals += [2 ** 37, -(2 ** 37), 3 * 2 ** 37 + 2 ** 76, -(2 ** 75) + 2 ** 37]
    vals = [v for v in vals if abs(v) <= lim]
    want = [float(Fraction(v)) for v in vals]
    shift = np.zeros((len(vals), 1), dtype=np.int64)
    wts = mods.weights(None)[0]
    canon = np.array([[cpu.sym(np.float64(v % p), p) for p in mods.values] for v in vals])
    got = cpu.finish(canon[:, None, :], wts, mods, shift)[:, 0]
    assert want == got.tolist()
    for _ in range(3):  # other representatives: r + k p within [-384, 384]
        reps = [[int(c) + p * int(rng.integers(-((384 + int(c)) // p), (384 - int(c)) // p + 1))
                 for c, p in zip(row, mods.values)] for row in canon]
        C = np.array(reps, dtype=np.float64)
        assert np.abs(C).max() <= 384
        again = cpu.finish(C[:, None, :], wts, mods, shift)[:, 0]
        assert np.array_equal(again.view(np.int64), got.view(np.int64))


def test_residues_exact(rng):
    """Residues of integers up to 2^79 (split hi * 2^40 + lo) match Python's, in the symmetric range."""
    x = np.array([0.0, 1.0, -1.0, 2.0 ** 79 - 2 ** 27, -(2.0 ** 78) - 2 ** 26, 12345678901234.0, -3.0 * 2 ** 60])
    hi = np.floor(x * 2.0 ** -40)
    lo = x - hi * 2.0 ** 40
    for p in (256, 255, 241, 5):
        inv = 1.0 / p
        r = cpu.sym(cpu.mod(cpu.mod(hi, p, inv) * (2 ** 40 % p) + cpu.mod(lo, p, inv), p, inv), p)
        want = [((int(v) % p) + p // 2) % p - p // 2 if p % 2 == 0 else ((int(v) % p) + (p - 1) // 2) % p - (p - 1) // 2
                for v in x]
        assert r.tolist() == want


def test_product_is_the_rounded_exact_product_of_the_truncated_operands(rng):
    """The only errors are the truncation to integers and the final rounding."""
    a = testmats.phi_matrix(5, 9, 2.0, rng)
    b = testmats.phi_matrix(9, 4, 2.0, rng)
    c, rep = gemm.matmul(a, b, method=CRT, moduli=12, return_report=True)
    mods = Moduli.first(12, "general")
    ea, _, _ = scale.line_exponents((a,), False)
    eb, _, _ = scale.line_exponents((np.ascontiguousarray(b.T),), False)
    sa, sb = scale.shifts(ea, mods.alpha), scale.shifts(eb, mods.beta)
    ia = [[int(np.trunc(np.ldexp(a[i, k], int(sa[i])))) for k in range(9)] for i in range(5)]
    ib = [[int(np.trunc(np.ldexp(b[k, j], int(sb[j])))) for j in range(4)] for k in range(9)]
    for i in range(5):
        assert sum(x * x for x in ia[i]) <= 4 ** mods.alpha
        for j in range(4):
            exact = sum(ia[i][k] * ib[k][j] for k in range(9))
            assert abs(exact) <= mods.P // 4
            assert c[i, j] == float(Fraction(exact) / Fraction(2) ** int(sa[i] + sb[j]))
    assert rep.choices["alpha"] == mods.alpha and rep.choices["moduli"] == 12


def test_norm_bound_is_tight_and_valid(rng):
    """2^E bounds the line norm, within the documented factor 2.25."""
    x = testmats.phi_matrix(50, 300, 4.0, rng)
    x[3] = 0.0
    x[7, :250] = 0.0
    E, bad, _ = scale.line_exponents((x,), False)
    assert bad == 0 and E[3] == scale.ZERO_LINE
    nrm = np.linalg.norm(np.delete(x, 3, axis=0), axis=1)
    E = np.delete(E, 3)
    assert np.all(nrm <= np.ldexp(1.0, E)) and np.all(np.ldexp(1.0, E) < 2.25 * nrm)


# --- accuracy --------------------------------------------------------------------------------


@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("phi", [0.1, 1.0, 2.0, 4.0])
def test_phi_53_bits_at_or_below_native(phi, cplx):
    rng = np.random.default_rng(int(phi * 10) + 3 + cplx)
    a, b = _phi(rng, 48, 512, 48, phi, cplx)
    c, rep = gemm.matmul(a, b, method=CRT, return_report=True)
    e_crt, e_native = _mean_rel(c, a, b), _mean_rel(a @ b, a, b)
    assert e_crt <= e_native, (e_crt, e_native, rep.choices["moduli"])


@pytest.mark.parametrize("cplx", [False, True])
def test_error_decreases_with_moduli(rng, cplx):
    a, b = _phi(rng, 32, 256, 32, 1.0, cplx)
    errs = [_mean_rel(gemm.matmul(a, b, method=CRT, moduli=n, complex_form="3m"), a, b) for n in range(4, 17, 2)]
    assert all(e1 < e0 for e0, e1 in zip(errs, errs[1:])), errs
    assert errs[-1] < 1e-16 < errs[0]


def test_error_within_reported_bound(rng):
    a, b = _phi(rng, 40, 200, 30, 2.0, True)
    for n in (6, 10, 14):
        c, rep = gemm.matmul(a, b, method=CRT, moduli=n, return_report=True)
        ref = gemm.matmul(a, b, method="dd")
        bound = rep.choices["error_bound"] * np.outer(np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=0))
        err = np.maximum(np.abs((c - ref).real), np.abs((c - ref).imag))
        assert np.all(err <= bound + 2.0 ** -52 * np.abs(ref))


@pytest.mark.parametrize("cplx", [False, True])
def test_scale_invariance(rng, cplx):
    a, b = _phi(rng, 24, 128, 20, 1.0, cplx)
    c = gemm.matmul(a, b, method=CRT)
    # powers of two: the same integers, the same bits
    for ea, eb in ((-100, 3), (200, -250), (-1000, 60)):
        got = gemm.matmul(np.ldexp(a.real, ea) + 1j * np.ldexp(a.imag, ea) if cplx else np.ldexp(a, ea),
                          np.ldexp(b.real, eb) + 1j * np.ldexp(b.imag, eb) if cplx else np.ldexp(b, eb), method=CRT)
        want = np.ldexp(c.real, ea + eb) + 1j * np.ldexp(c.imag, ea + eb) if cplx else np.ldexp(c, ea + eb)
        assert np.array_equal(got, want)
    e1 = _mean_rel(c, a, b)
    for s in (1e-30, 1e30):
        e = _mean_rel(gemm.matmul(a * s, b * s, method=CRT), a * s, b * s)
        assert e < 1e-16 and e <= 2 * e1 + 1e-17, (s, e, e1)


def test_zeros(rng):
    a, b = _phi(rng, 6, 10, 5, 1.0, True)
    a[2] = 0
    b[:, 3] = 0
    a[4, :7] = 0
    c = gemm.matmul(a, b, method=CRT)
    assert np.all(c[2] == 0) and np.all(c[:, 3] == 0)
    assert np.abs(c - a @ b).max() <= 1e-15 * np.abs(a @ b).max()
    z = gemm.matmul(np.zeros((3, 4)), np.zeros((4, 2)), method=CRT)
    assert np.array_equal(z, np.zeros((3, 2)))
    assert np.array_equal(gemm.matmul(np.zeros((3, 4)), b[:4, :2].real.copy(), method=CRT), np.zeros((3, 2)))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["a", "b"])
def test_non_finite_raise(bad, where):
    a = np.ones((3, 4), dtype=complex)
    b = np.ones((4, 2), dtype=complex)
    (a if where == "a" else b)[1, 1] = bad
    with pytest.raises(gemm.NonFiniteError, match=rf"^{where} holds 1 NaN/Inf element\(s\); this method needs finite operands$"):
        gemm.matmul(a, b, method=CRT)


# --- operand forms, complex forms, blocks ----------------------------------------------------


@pytest.mark.parametrize("cplx", [False, True])
def test_stacked_operands_match_2d(rng, cplx):
    gen = testmats.complex_phi_matrix if cplx else testmats.phi_matrix
    u = gen(16, 16, 1.0, rng)
    s = gen(3 * 16, 40, 1.0, rng).reshape(3, 16, 40)
    got = gemm.matmul(u, s, method=CRT, moduli=14)  # U @ S[h]: the gate on middle qubits
    assert got.shape == (3, 16, 40)
    # the column scaling of each S[h] line is that of the 2-D product with all batches side by side
    wide = gemm.matmul(u, np.concatenate(list(s), axis=1), method=CRT, moduli=14)
    assert np.array_equal(got, wide.reshape(16, 3, 40).transpose(1, 0, 2))
    st = gen(3 * 20, 16, 1.0, rng).reshape(3, 20, 16)
    got = gemm.matmul(st, u.T, method=CRT, moduli=14)  # S @ U.T, a transposed view
    assert np.array_equal(got, gemm.matmul(st.reshape(60, 16), u.T, method=CRT, moduli=14).reshape(3, 20, 16))
    both = gemm.matmul(st, s[:, :16, :], method=CRT, moduli=14)
    for h in range(3):
        assert np.array_equal(both[h], gemm.matmul(st[h], s[h, :16, :], method=CRT, moduli=14))
    assert np.abs(got - st @ u.T).max() < 1e-13


@pytest.mark.parametrize("family", ["general", "split"])
def test_complex_forms_bit_identical_on_one_moduli_set(rng, family):
    a, b = _phi(rng, 20, 64, 12, 2.0, True)
    m = gemm.get_method(CRT)
    mods = Moduli.first(13, family)
    forms = ["4m", "3m", "2m"] if family == "split" else ["4m", "3m"]
    outs = []
    for f in forms:
        rep = gemm.Report(CRT, "cpu", a.shape, b.shape, (20, 12), "complex128", 0.0)
        outs.append(m._product(np, a, b, np.dtype(np.complex128), rep, gemm.timing.StageTimer(), {"complex_form": f}, mods))
    for o in outs[1:]:
        assert np.array_equal(o, outs[0])
    # the default 4m and 3m calls share the general set, so their results are identical too
    assert np.array_equal(gemm.matmul(a, b, method=CRT, complex_form="4m"), gemm.matmul(a, b, method=CRT, complex_form="3m"))


@pytest.mark.parametrize("big", ["a", "b"])
def test_blocks_bit_identical(rng, monkeypatch, big):
    a, b = _phi(rng, 300, 24, 20, 1.0, True) if big == "a" else _phi(rng, 20, 24, 300, 1.0, True)
    want = gemm.matmul(a, b, method=CRT)
    monkeypatch.setitem(method.BLOCK_BYTES, "cpu", (1, 1))
    got, rep = gemm.matmul(a, b, method=CRT, return_report=True)
    assert rep.choices["blocks"] > 1
    assert np.array_equal(got, want)


def test_report(rng):
    a, b = _phi(rng, 16, 64, 16, 1.0, True)
    _, rep = gemm.matmul(a, b, method=CRT, return_report=True)
    ch = rep.choices
    assert ch["complex_form"] == "2m" and ch["moduli_family"] == "split" and ch["target_met"]
    assert ch["moduli"] == len(ch["moduli_values"]) and ch["int8_products_per_modulus"] == 2
    assert ch["error_bound"] < ch["native_bound"] and max(ch["mean_loss_bits"].values()) <= moduli.MEAN_LOSS_BITS
    assert {"scale", "residues", "int8_gemm", "reconstruct"} <= set(rep.stages)
    assert rep.workspace_bytes > 0
    assert gemm.get_method(CRT).workspace_bytes(1 << 12, 64, 64, np.complex128, device="gpu") > 0


def test_target_not_met_is_reported(rng):
    a, b = _phi(rng, 8, 64, 8, 4.0, False)
    _, rep = gemm.matmul(a, b, method=CRT, bits=100, return_report=True)
    assert rep.choices["moduli"] == moduli.MAX_MODULI and not rep.choices["target_met"]
    assert "needs more than 20 general moduli" in rep.notes[0]


def test_fused_products_check_their_inputs():
    """products_r8 rejects what its kernel cannot take before it touches the device (checked here
    with numpy arrays; the kernel itself runs in test_crt_gpu.py)."""
    from gemm.ozaki.crt import wgmma
    from gemm.ozaki.crt.moduli import Moduli

    mods = Moduli.first(2, "split")
    good = np.zeros((2, 2, 8, 128), dtype=np.int8)
    cases = [
        ((good, good, mods), {"load": "cp.async"}, r"load='cp.async' is not valid"),
        ((good.astype(np.int16), good, mods), {}, r"residues must be int8"),
        ((good, good[:, :1], mods), {}, r"do not agree on \(moduli, parts\)"),
        ((good, good, Moduli.first(3, "split")), {}, r"do not agree on \(moduli, parts\)"),
        ((good[..., :96].copy(), good[..., :96].copy(), mods), {}, r"128-byte multiples"),
        ((good[..., :0].copy(), good[..., :0].copy(), mods), {}, r"128-byte multiples"),
        ((good[:, :, ::2], good, mods), {}, r"C-contiguous"),
    ]
    for args, kw, match in cases:
        with pytest.raises(ValueError, match=match):
            wgmma.products_r8(None, *args, **kw)


class _FakeCupy:
    """Just enough of cupy for the host side of a launch: numpy arrays and a device of ``sms``
    multiprocessors (id 1000 + sms, apart from any real device in the module caches)."""

    int8 = np.int8

    def __init__(self, sms):
        dev = types.SimpleNamespace(id=1000 + sms, attributes={"MultiProcessorCount": sms})
        self.cuda = types.SimpleNamespace(Device=lambda *a: dev)

    asarray = staticmethod(np.asarray)


def _kernel_params(name):
    """``(is_pointer, numpy type)`` of each parameter of the ``extern "C"`` kernel ``name`` of crt.cu."""
    src = resources.files("gemm.ozaki.crt").joinpath("crt.cu").read_text()
    sig = re.search(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?' + name + r"\((.*?)\)\s*\{", src,
                    re.S).group(1)
    scalar = {"int": np.int32, "long long": np.int64, "double": np.float64}
    out = []
    for p in sig.split(","):
        p = re.sub(r"\b(const|__restrict__)\b", "", p).split()
        out.append(("*" in "".join(p), None if "*" in "".join(p) else scalar[" ".join(p[:-1])]))
    return out


@pytest.mark.parametrize("kernel, item", [("crt_reconstruct", 4), ("crt_reconstruct_r8", 1)])
@pytest.mark.parametrize("sms", [132, 78])
def test_reconstruct_launch_matches_the_kernel(monkeypatch, kernel, item, sms):
    """gpu._reconstruct's arguments line up with the kernel's parameters (pointers where it takes
    pointers, scalars of its widths), and its grid aims at 16 blocks per multiprocessor."""
    from gemm.ozaki.crt import gpu

    launches = []
    monkeypatch.setattr(gpu, "_TABLES", {})
    monkeypatch.setattr(gemm.device, "_SMS", {})
    monkeypatch.setattr(gpu, "_fn", lambda cp, name, defines=(): (
        lambda grid, block, args, shared_mem=0: launches.append((name, defines, grid, block, args))))
    mods = Moduli.first(9, "split")
    rows, cols = 5000, 700
    P = np.zeros((9, 2, rows, 704), dtype=np.int32 if item == 4 else np.int8)
    out = np.zeros((rows, cols), dtype=np.complex128)
    gpu._reconstruct(_FakeCupy(sms), kernel, P, mods, "2m", np.zeros(rows, np.int32), np.zeros(cols, np.int32),
                     0, 0, cols, out)
    (name, defines, grid, block, args), = launches
    assert name == kernel and defines == gpu._module_defines(mods, "2m")
    params = _kernel_params(kernel)
    assert len(args) == len(params)
    for a, (ptr, typ) in zip(args, params):
        assert isinstance(a, np.ndarray) if ptr else type(a) is typ
    gx = -(-cols // gpu.REC_COLUMNS[item])
    assert grid == (gx, -(-16 * sms // gx))


def test_fused_products_check_the_output_alignment():
    """products_r8 refuses an output whose rows its 16-byte stores would misalign (cupy's
    allocations are 256-byte aligned: a guard, checked here with a fake allocation)."""
    from gemm.ozaki.crt import wgmma

    cp = _FakeCupy(132)
    cp.empty = lambda shape, dtype: types.SimpleNamespace(shape=shape, data=types.SimpleNamespace(ptr=8))
    good = np.zeros((2, 2, 8, 128), dtype=np.int8)
    with pytest.raises(ValueError, match=r"16-byte multiples on a 16-byte boundary"):
        wgmma.products_r8(cp, good, good, Moduli.first(2, "split"))


@pytest.mark.parametrize("form, n", [(None, 17), ("2m", 17), ("2m", 20), ("3m", 20), ("3m", 9), (None, 2)])
def test_mma_reconstruction_limbs_give_the_fp64_words(rng, form, n):
    """The INT8 tensor-core reconstruction (crt.cu crt_reconstruct_mma): the limb sums of the
    products' residues, ``T = limbs @ u`` (exact INT32), give through ``sum_l T 2^(8 l)`` the words
    ``S_w = sum_i c_i w_iw`` of the FP64 kernel and the CPU, for residues at the ends of their range."""
    from gemm.ozaki.crt import gpu

    mods = Moduli.first(n, moduli.family_for(form))
    G, W = moduli.PARTS[form], mods.words
    L = gpu.mma_limbs(mods, form).astype(np.int64)
    parts = 1 if form is None else 2
    assert L.shape == (48 * -(-parts * W // 8), gpu.MMA_K) and not L[:, n * G:].any()
    used = sorted(gpu.mma_row(wd, k) for wd in range(parts * W) for k in range(gpu.MMA_LIMBS))
    assert len(set(used)) == len(used) and not np.delete(L, used, axis=0).any()
    elems = 300
    U = rng.integers(-128, 128, (n, G, 1, elems)).astype(np.float64)
    U[..., :3] = -128  # the extremes
    U[..., 3:6] = 127
    u = np.zeros((gpu.MMA_K, elems), dtype=np.int64)
    u[:n * G] = U.reshape(n * G, elems)  # plane q = i G + g
    T = L @ u
    assert np.abs(T).max() < 2**20  # INT32 and exact: 64 * 128 * 128
    for part in range(parts):
        S = cpu.crt_values(U, form, part)[0] @ mods.weights(form)[part]  # (elems, W), exact
        for w in range(W):
            word = sum(T[gpu.mma_row(part * W + w, k)] * 256**k for k in range(gpu.MMA_LIMBS))
            assert np.abs(word).max() < 2**53
            assert np.array_equal(word.astype(np.float64), S[:, w])


def test_balanced_limbs():
    from gemm.ozaki.crt import gpu

    for v in (0, 1, -1, 127, 128, -128, -129, 2**38 - 1, -(2**38 - 1), 123456789012):
        limbs = gpu.balanced_limbs(v)
        assert all(-128 <= x <= 127 for x in limbs) and sum(x * 256**k for k, x in enumerate(limbs)) == v
    with pytest.raises(ValueError, match="limbs do not hold"):
        gpu.balanced_limbs(2**40)


def test_mma_reconstruct_launch_matches_the_kernel(monkeypatch):
    """gpu._reconstruct_mma's arguments line up with crt_reconstruct_mma's parameters, and its
    shared memory holds the kernel's row buffers and limb sums."""
    from gemm.ozaki.crt import gpu

    launches = []
    monkeypatch.setattr(gpu, "_TABLES", {})
    monkeypatch.setattr(gpu, "_LIMBS", {})
    monkeypatch.setattr(gemm.device, "_SMS", {})
    monkeypatch.setattr(gpu, "_fn", lambda cp, name, defines=(): (
        lambda grid, block, args, shared_mem=0: launches.append((name, defines, grid, block, args, shared_mem))))
    mods = Moduli.first(17, "split")
    rows, cols = 5000, 700
    P = np.zeros((17, 2, rows, 704), dtype=np.int8)
    out = np.zeros((rows, cols), dtype=np.complex128)
    gpu._reconstruct_mma(_FakeCupy(132), P, mods, "2m", np.zeros(rows, np.int32), np.zeros(cols, np.int32),
                         0, 0, cols, out)
    (name, defines, grid, block, args, smem), = launches
    assert name == "crt_reconstruct_mma" and defines == gpu._module_defines(mods, "2m")
    params = _kernel_params(name)
    assert len(args) == len(params)
    for a, (ptr, typ) in zip(args, params):
        assert isinstance(a, np.ndarray) if ptr else type(a) is typ
    assert grid[0] == -(-cols // gpu.MMA_COLUMNS) and block == (gpu.MMA_COLUMNS,)
    assert smem == 2 * 34 * (gpu.MMA_COLUMNS + 16) + 4 * 32 * (2 * mods.words | 1) * 8 <= 48 << 10
    with pytest.raises(ValueError, match="forms"):
        gpu.mma_limbs(mods, "4m")
