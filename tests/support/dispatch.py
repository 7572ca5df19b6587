"""A dispatch-mode spy: which dtypes the kernels of each op receive."""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class OperandDtypes(TorchDispatchMode):
    """Records (op, operand dtypes) of every op that reaches it: entered outside Bf16MatmulsInFp32, it sees
    what that mode passes on to the kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[object, set[torch.dtype]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        dtypes = {a.dtype for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.is_floating_point()}
        self.calls.append((func, dtypes))
        return func(*args, **kwargs)

    def widened_calls(self) -> list[set[torch.dtype]]:
        from gigpo.infra.cpu_bf16 import WIDENED_OPS

        return [d for f, d in self.calls if f in WIDENED_OPS]


class NewTensorsOfShape(TorchDispatchMode):
    """Records the tensors that ops create with last dimension `last` and at least `numel` elements: new
    memory of that size, not views or in-place results (their storage is an operand's)."""

    def __init__(self, last: int, numel: int) -> None:
        super().__init__()
        self.last, self.numel = last, numel
        self.created: list[tuple[object, tuple[int, ...], torch.dtype]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_leaves

        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        operands = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if (isinstance(t, torch.Tensor) and t.dim() and t.shape[-1] == self.last and t.numel() >= self.numel
                    and t.untyped_storage().data_ptr() not in operands):
                self.created.append((func, tuple(t.shape), t.dtype))
        return out


class HostSyncs(TorchDispatchMode):
    """Counts the ops that make the host wait for the device on a GPU, by name: a scalar read (`.item()`,
    `float(t)`, `bool(t)`: aten._local_scalar_dense), a copy to the CPU asked for by device (`.to("cpu")`), and
    the ops whose output size depends on values (nonzero, unique). On a CPU nothing waits, but the same calls
    reach this mode, so a CPU test counts what a GPU would wait for. `.tolist()` and `.cpu()` of a CPU tensor
    do not reach it. A `_to_copy` that changes the dtype is a cast, counted only where it also names a device
    other than its operand's: autograd's backward of a cast names the operand's device (a CUDA one on a GPU),
    which on a CPU would look like a copy to the host."""

    VALUE_SIZED = ("nonzero", "_unique2", "unique_dim", "unique_consecutive", "masked_select")

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        to_cpu = (name == "_to_copy" and kwargs.get("device") is not None and torch.device(kwargs["device"]).type == "cpu"
                  and (kwargs.get("dtype") in (None, args[0].dtype) or args[0].device.type != "cpu"))
        if name == "_local_scalar_dense" or to_cpu or name in self.VALUE_SIZED:
            self.calls.append(name)
        return func(*args, **kwargs)
