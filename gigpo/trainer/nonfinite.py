"""The one exception for NaN/inf in training, and the one guard that raises it.

Wherever a NaN appears (a reward, an advantage, a log-prob, a loss, a gradient), training stops before
anything corrupt is saved and `gigpo train` prints "training stopped: ..." and exits with code 3.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

from gigpo.advantage.rows import NonFiniteRows


class NonFiniteError(FloatingPointError):
    """NaN or inf in training state; raised on every rank at once. `gigpo train` exits with code 3."""


def require_finite(name: str, values: Any, where: str) -> None:
    """Raise NonFiniteError naming `name`, `where` and the first bad index if `values` hold a NaN or inf."""
    array = np.asarray(values, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise NonFiniteError(f"{where}: {name} has {bad.size} non-finite value(s) (first at index {int(bad[0])}: "
                             f"{array.flat[bad[0]]}); stopping before anything is saved")


@contextmanager
def stop_on_nonfinite_rows(where: str) -> Iterator[None]:
    """Inside: a NaN/inf reward found when a rollout builds its StepRows stops training as any NaN does."""
    try:
        yield
    except NonFiniteRows as exc:
        raise NonFiniteError(f"{where}: non-finite step rows: {exc}; stopping before anything is saved") from None
