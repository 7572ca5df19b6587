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
