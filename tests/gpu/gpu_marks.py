"""The skip every tests/gpu module applies (imported as a module so the reason is written once)."""
from __future__ import annotations

import pytest
import torch

NO_CUDA = "needs a CUDA GPU (torch.cuda.is_available() is False); run on a GPU machine, see docs/gpu.md"
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)


def requires_gpus(count: int) -> pytest.MarkDecorator:
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return pytest.mark.skipif(have < count, reason=f"needs {count} CUDA GPUs, this machine has {have}")
