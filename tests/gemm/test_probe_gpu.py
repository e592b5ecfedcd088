"""Tensor-core numerics probed through our mma.sync instructions (Fasi, Higham, Mikaitis, Pranesh)."""

import pytest

pytestmark = pytest.mark.gpu


def test_probe_properties_the_design_relies_on(cp):
    from gemm.diagnostics import probe

    rows = probe.probe_all()
    print("\n" + probe.format_table(rows))
    for r in rows:
        assert r["exact_products"], r
        assert r["block_error_ulps"] <= 1.0, r
        assert r["monotonic"], r
        # the tensor core truncates its sums: the reason hi*hi is accumulated outside it
        assert r["rounding"] == "RZ", r
        assert probe.design_assumptions(r) == [], r
    fp16 = [r for r in rows if r["format"] == "fp16"][0]
    assert fp16["subnormal_inputs"], fp16  # lo parts of small elements are FP16 subnormals


def test_probe_bad_format(cp):
    from gemm.diagnostics import probe

    with pytest.raises(ValueError, match=r"fmt must be one of tf32, fp16, got 'bf16'"):
        probe.probe("bf16")


def test_probe_cli(cp, capsys):
    from qsim_tc.cli import main

    rc = main(["probe"])
    out = capsys.readouterr().out
    assert "products exact" in out and "accumulation rounding" in out
    assert rc == 0


def test_the_cpu_model_of_one_instruction_is_the_gpus(cp):
    # the emulations (tcec, stages.tc32) reproduce the kernels only if gemm.tcec.emulate.tc_mma
    # gives each instruction's result bit for bit; the probe names the kept bits that come closest
    from gemm.diagnostics import probe

    for r in probe.probe_all():
        assert r["model_agreement"] == 1.0, (r["format"], r["model_best_extra_bits"], r["model_agreement_by_bits"])
