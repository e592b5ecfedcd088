"""One colour and marker per GEMM method, shared by every figure (gemm's and qsim_tc's).

Colours follow the method families: blues for the native products, greens for the Ozaki INT8
methods, oranges/reds for the error-corrected TF32/FP16 ones, greys and purples for the
uncorrected comparison methods, black for the double-double reference. A method not in the
table gets a grey with a marker of its own, so a new method still plots distinctly.
"""

from __future__ import annotations

# name -> (colour, marker); colours are the Tableau / ColorBrewer shades matplotlib ships
METHOD_STYLE: dict[str, tuple[str, str]] = {
    "native": ("#1f77b4", "o"),
    "native32": ("#17becf", "s"),
    "native3m": ("#aec7e8", "D"),
    "int8": ("#98df8a", "v"),
    "int8-auto": ("#2ca02c", "^"),
    "int8-crt": ("#006d2c", "d"),
    "tf32tf32": ("#ff7f0e", "<"),
    "halfhalf": ("#d62728", ">"),
    "tc-auto": ("#8c564b", "p"),
    "tf32": ("#9467bd", "x"),
    "fp16": ("#e377c2", "+"),
    "markidis": ("#bcbd22", "*"),
    "dd": ("#000000", "h"),
}
REFERENCE_LABEL = "dd reference"
_SPARE_MARKERS = ("P", "X", "d", "1", "2", "3", "4")


def method_style(name: str) -> dict:
    """Keyword arguments (``color``, ``marker``) for plotting method ``name``."""
    if name in METHOD_STYLE:
        color, marker = METHOD_STYLE[name]
    elif name.startswith("dd"):
        color, marker = METHOD_STYLE["dd"]
    else:
        color, marker = "#7f7f7f", _SPARE_MARKERS[sum(map(ord, name)) % len(_SPARE_MARKERS)]
    return {"color": color, "marker": marker}


def require_matplotlib(what: str = "plotting"):
    """``matplotlib.pyplot`` with the Agg backend, or an ImportError saying what to install."""
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError(f"{what} needs matplotlib: pip install matplotlib (or, in a checkout, "
                          "pip install \".[plot]\")") from exc
    return plt


def offsets(n: int, width: float = 0.5) -> list[float]:
    """x offsets of ``n`` series drawn at one category, so that equal values do not hide each other."""
    if n <= 1:
        return [0.0] * n
    step = width / (n - 1)
    return [-width / 2 + i * step for i in range(n)]
