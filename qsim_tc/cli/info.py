"""``qsim-tc info``: device, library versions, available GEMM methods, the cost table in use."""

from __future__ import annotations

import gemm
from qsim_tc import calibrate
from qsim_tc.cli.common import add_device
from qsim_tc.environment import environment


def register(sub) -> None:
    p = sub.add_parser("info", help="device, library versions, GEMM methods and the cost table in use")
    add_device(p)
    p.set_defaults(func=run)


def run(args) -> int:
    dev = gemm.resolve_device(getattr(args, "device", "auto"))
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
    # reading, not measuring: info never starts a calibration
    table = calibrate.table_for(dev, calibrate_missing=False, message=lambda text: print(f"cost table: {text}"))
    print(f"cost table: {table.describe()}")
    print(f"cost table cache: {calibrate.cache_path(calibrate.device_key(dev))}")
    return 0
