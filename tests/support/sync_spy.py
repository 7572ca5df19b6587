"""A spy on a weight sync: records every way the trainer's tensors could leave the in-process path.

What it records, while active: a copy of a trainer tensor to another device or to a fresh tensor
(`Tensor.to` with another device or copy=True, `Tensor.cpu`, `Tensor.clone`), a file written under
/dev/shm or the temp dir (Python opens for writing, safetensors' and torch's savers), and any
torch.distributed collective or process-group call. It patches torch's own classes, so the engine's
code is watched too, but only tensors that share storage with the trainer's parameters count as copies.
"""
from __future__ import annotations

import builtins
import os
import tempfile
from contextlib import ExitStack, contextmanager
from typing import Iterator
from unittest import mock

import torch
import torch.distributed as dist

COLLECTIVES = ("broadcast", "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object",
               "reduce_scatter", "reduce_scatter_tensor", "broadcast_object_list", "send", "recv", "isend", "irecv",
               "scatter", "gather", "reduce", "barrier", "all_to_all", "all_to_all_single")
"""torch.distributed functions; none may run on a path that makes no collective beyond a ZeRO-3 gather."""
GROUP_METHODS = ("broadcast", "allreduce", "allgather", "send", "recv", "barrier")
"""ProcessGroup methods called directly (gigpo's broadcast group does)."""


class SyncSpy:
    """What a sync did that the in-process path must not do; `events` lists them, one string each."""

    def __init__(self, params: Iterator[torch.Tensor]) -> None:
        self.params = list(params)
        self.events: list[str] = []
        self.watched_dirs = tuple(os.path.realpath(d) for d in ("/dev/shm", tempfile.gettempdir()))

    def trainer_tensor(self, t: object) -> bool:
        """Whether `t` shares storage with a parameter as it is now (a ZeRO-3 gather gives a parameter a
        new storage for the length of the gather, so this is looked up at each call)."""
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            return False
        ptr = t.untyped_storage().data_ptr()
        return any(p.numel() and p.untyped_storage().data_ptr() == ptr for p in self.params)

    def watched_path(self, path: object) -> bool:
        return isinstance(path, (str, os.PathLike)) and os.path.realpath(path).startswith(self.watched_dirs)


@contextmanager
def spy_on_sync(model: torch.nn.Module) -> Iterator[SyncSpy]:
    """Spy on everything done to `model`'s tensors while the block runs."""
    spy = SyncSpy(model.parameters())
    to, cpu, clone, opener = torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.clone, builtins.open

    def spied_to(self, *args, **kwargs):
        out = to(self, *args, **kwargs)
        if spy.trainer_tensor(self) and (out.device != self.device or kwargs.get("copy", False)):
            spy.events.append(f"Tensor.to {tuple(self.shape)} {self.device} -> {out.device} copy={kwargs.get('copy')}")
        return out

    def spied_cpu(self, *args, **kwargs):
        if spy.trainer_tensor(self):
            spy.events.append(f"Tensor.cpu {tuple(self.shape)} from {self.device}")
        return cpu(self, *args, **kwargs)

    def spied_clone(self, *args, **kwargs):
        if spy.trainer_tensor(self):
            spy.events.append(f"Tensor.clone {tuple(self.shape)}")
        return clone(self, *args, **kwargs)

    def spied_open(file, mode="r", *args, **kwargs):
        if spy.watched_path(file) and any(c in mode for c in "wax+"):
            spy.events.append(f"open {file} {mode}")
        return opener(file, mode, *args, **kwargs)

    def file_saver(name, real):
        def saver(obj, path, *args, **kwargs):
            if spy.watched_path(path):
                spy.events.append(f"{name} {path}")
            return real(obj, path, *args, **kwargs)
        return saver

    def collective(name, real):
        def call(*args, **kwargs):
            spy.events.append(f"collective {name}")
            return real(*args, **kwargs)
        return call

    import safetensors.torch

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(torch.Tensor, "to", spied_to))
        stack.enter_context(mock.patch.object(torch.Tensor, "cpu", spied_cpu))
        stack.enter_context(mock.patch.object(torch.Tensor, "clone", spied_clone))
        stack.enter_context(mock.patch.object(builtins, "open", spied_open))
        stack.enter_context(mock.patch.object(safetensors.torch, "save_file",
                                              file_saver("safetensors.save_file", safetensors.torch.save_file)))
        stack.enter_context(mock.patch.object(torch, "save", file_saver("torch.save", torch.save)))
        for name in COLLECTIVES:
            if hasattr(dist, name):
                stack.enter_context(mock.patch.object(dist, name, collective(name, getattr(dist, name))))
        for cls in (dist.ProcessGroup, getattr(dist, "ProcessGroupGloo", None)):
            for name in GROUP_METHODS:
                if cls is not None and name in vars(cls):
                    stack.enter_context(mock.patch.object(cls, name, collective(f"{cls.__name__}.{name}", vars(cls)[name])))
        yield spy
