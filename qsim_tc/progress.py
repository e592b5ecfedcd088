"""Progress of long runs on stderr, and the one-time notice that an emulated method runs on a CPU.

:class:`Progress` is what ``Simulator.run(progress=True)``, ``accuracy_table(progress=True)``
and the command line use: nothing for a stage that ends within ``after`` seconds; on a terminal,
a bar redrawn in place (carriage returns); into a file or a pipe, one line when the stage ends.
"""

from __future__ import annotations

import sys
import time
import warnings


class EmulationOnCPUWarning(UserWarning):
    """An emulated tensor-core method runs on a CPU: bit-exact, for validation, and slow."""


# measured on a 2-core CPU, 16-20-qubit brickworks, d = 2-4: the emulated methods against native
CPU_SLOWDOWN = "5-200x"
_warned: set[str] = set()


def is_emulated(method) -> bool:
    """Whether ``method`` (a gemm Method) emulates tensor-core arithmetic (Ozaki INT8, TF32/FP16)."""
    family = type(method).__module__.split(".")
    return len(family) > 1 and family[0] == "gemm" and family[1] in ("ozaki", "tcec")


def warn_emulated_on_cpu(method, device) -> None:
    """Warn once per process and method when an emulated method runs on the CPU."""
    if device.is_gpu or not is_emulated(method) or method.name in _warned:
        return
    _warned.add(method.name)
    warnings.warn(f"method {method.name!r} runs on the CPU: it emulates tensor-core arithmetic bit for bit, "
                  f"for validation rather than speed, and takes {CPU_SLOWDOWN} as long as 'native' "
                  "(use native or native32 for speed on a CPU)", EmulationOnCPUWarning, stacklevel=3)


class Progress:
    """Progress of one or more stages on a stream (stderr by default).

    Call :meth:`stage` to start a stage; the object itself is a ``progress(done, total)``
    callback for the current stage (``Simulator.run``'s ``progress=``).

    Args:
        label: the first stage's name.
        after: seconds a stage must last before anything is shown.
        stream: where to write (default ``sys.stderr``).
        bar: draw a bar with carriage returns (default: only when ``stream`` is a terminal).
        unit: what ``done`` and ``total`` count.
    """

    def __init__(self, label: str = "simulating", after: float = 1.5, stream=None, bar: bool | None = None,
                 unit: str = "gates"):
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        if bar is None:
            isatty = getattr(self.stream, "isatty", None)
            bar = bool(isatty and isatty())
        self.bar = bar
        self.after = after
        self.stage(label)

    def stage(self, label: str) -> Progress:
        """Start a new stage named ``label`` (ending the previous one's line)."""
        self.label = label
        self.t0 = time.perf_counter()
        self.shown = False
        self.done = self.total = 0
        return self

    def __call__(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        el = time.perf_counter() - self.t0
        if el < self.after:
            return
        if self.bar:
            width = 30
            fill = int(width * done / max(total, 1))
            eta = el / done * (total - done) if done else 0.0
            self.stream.write(f"\r{self.label} [{'#' * fill}{'.' * (width - fill)}] {done}/{total} {self.unit} "
                              f"{el:6.1f} s, {eta:5.1f} s left")
            if done == total:
                self.stream.write("\n")
            self.shown = True
            self.stream.flush()
        elif done == total:
            self.stream.write(f"{self.label}: {total} {self.unit} in {el:.1f} s\n")
            self.shown = True
            self.stream.flush()
