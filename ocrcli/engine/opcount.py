"""Counting what one engine step asks of the host: aten operators dispatched and host syncs.

On a GPU every eager operator costs a few microseconds of host time and every device->host
read stalls the host until the device drains its queue, so these two counts bound how fast a
step can run whatever the device. `OpCounter` counts them on any device, the CPU included:

- operators: every aten call that reaches the dispatcher (views included);
- host syncs: `aten._local_scalar_dense` (`.item()`, `int(t)`, `bool(t)`), copies from a
  non-CPU tensor to the CPU, and `Tensor.tolist()` / `Tensor.numpy()`, which on a CPU tensor
  read memory without dispatching and would otherwise go unseen.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_SCALAR_READS = {torch.ops.aten._local_scalar_dense.default}
_COPIES = {torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default}


class OpCounter(TorchDispatchMode):
    """`with OpCounter() as c: ...` then `c.ops`, `c.syncs` and `c.by_op` (op name -> calls).
    It may be entered many times (once per engine step); `c.entries` counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.entries = 0
        self.ops = 0
        self.syncs = 0
        self.by_op: Counter[str] = Counter()
        self._saved: dict[str, object] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops += 1
        self.by_op[str(func.overloadpacket.__name__)] += 1
        if func in _SCALAR_READS or (func in _COPIES and _device_to_host(func, args, kwargs)):
            self.syncs += 1
        return func(*args, **kwargs)

    def __enter__(self):
        self.entries += 1
        for name in ("tolist", "numpy"):
            original = getattr(torch.Tensor, name)
            self._saved[name] = original
            setattr(torch.Tensor, name, self._counting(original))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved.clear()
        return super().__exit__(*exc)

    def _counting(self, original):
        def read_on_host(tensor, *args, **kwargs):
            self.syncs += 1
            return original(tensor, *args, **kwargs)

        return read_on_host


def _device_to_host(func, args, kwargs) -> bool:
    """A copy whose source is off the CPU and whose result lands on it."""
    if func is torch.ops.aten.copy_.default:
        dst, src = args[0], args[1]
        return src.device.type != "cpu" and dst.device.type == "cpu"
    src = args[0]
    target = kwargs.get("device")
    return src.device.type != "cpu" and target is not None and torch.device(target).type == "cpu"
