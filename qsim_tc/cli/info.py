"""``qsim-tc info``: device, library versions, available GEMM methods."""

from __future__ import annotations

import gemm
from qsim_tc.environment import environment


def register(sub) -> None:
    p = sub.add_parser("info", help="device, library versions and GEMM methods")
    p.set_defaults(func=run)


def run(args) -> int:
    dev = gemm.resolve_device("auto")
    print(f"device: {dev.name} ({dev.reason})")
    for k, v in environment().items():
        print(f"{k}: {v}")
    print("methods:")
    for name in gemm.methods():
        try:
            m = gemm.get_method(name)
            print(f"  {name:10s} {m.precision:5s} {m.description}")
        except Exception as exc:  # noqa: BLE001 - list what cannot load, and why
            print(f"  {name:10s} unavailable: {exc}")
    return 0
