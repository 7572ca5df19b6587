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
