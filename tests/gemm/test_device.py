"""gemm.device helpers that need no GPU to check."""

import types

import gemm.device
from gemm.device import sm_count


def test_sm_count_reads_the_attribute_once_per_device(monkeypatch):
    """Launch grids are sized by ``sm_count``: it reads ``MultiProcessorCount`` of the current
    device, as an int, once per device (the attribute query is slow)."""
    calls = []
    current = [0]

    class FakeDevice:
        def __init__(self):
            self.id = current[0]

        @property
        def attributes(self):
            calls.append(self.id)
            return {"MultiProcessorCount": 100.0 + self.id}

    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(Device=FakeDevice))
    monkeypatch.setattr(gemm.device, "_SMS", {})
    assert sm_count(cp) == 100 and isinstance(sm_count(cp), int)
    current[0] = 1
    assert sm_count(cp) == 101 and sm_count(cp) == 101
    assert calls == [0, 1]
