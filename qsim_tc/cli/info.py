"""``qsim-tc info``: device, library versions, available GEMM methods, the cost table in use, and
on a CPU what the stage executor takes from it (vector width, caches, chunk)."""

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
    if not dev.is_gpu:
        print(f"CPU stages: {_cpu_stages()}")
    return 0


def _size(nbytes: int | None) -> str:
    if not nbytes:
        return "unknown"
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def _cpu_stages() -> str:
    """The CPU stage executor's view of this host: the kernels' vector width, the caches it reads
    (sysfs) and the chunk it takes at each dtype's default L."""
    from qsim_tc.stages import choice, cpu, cpu_kernels, host_cache  # noqa: PLC0415 - numba, only here

    sizes = host_cache.cache_sizes()
    cap = host_cache.l2_chunk_cap()
    chunks = ", ".join(f"{name} {_size(cpu.default_block_bytes(item, choice.CPU_LOCAL_QUBITS[item], cpu._THREADS))} "
                       f"at L = {choice.CPU_LOCAL_QUBITS[item]}" for name, item in (("complex64", 8), ("complex128", 16)))
    cpu.host_fuse_costs()
    fusion = {"calibrated": "fusion costs calibrated on this host (qsim-tc calibrate --device cpu)",
              "cpu": f"fusion costs measured on {cpu_kernels.HOST_CPU} (shipped)",
              "vector": f"fusion costs of {cpu_kernels.VECTOR_BYTES * 8}-bit hosts (none measured on "
                        f"{cpu_kernels.HOST_CPU}; qsim-tc calibrate --device cpu measures them)"}[cpu.FUSE_COST_SOURCE]
    return (f"{cpu_kernels.VECTOR_BYTES * 8}-bit vectors, {cpu._THREADS} threads; L2 {_size(sizes.get(2))} a core, "
            f"last-level cache {_size(host_cache.last_level_cache())}; chunk {chunks}; "
            f"L2 cap {_size(cap) if cap else 'none (L2 under 2 MiB or unknown)'}; {fusion}")
