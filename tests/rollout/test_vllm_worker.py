"""The code gigpo runs inside vLLM's worker process, apart from the engine."""
from __future__ import annotations

import logging

from gigpo.rollout.weight_sync.worker import RELOAD_LOGGER, install_reload_warning_filter


def test_reload_warning_is_dropped_for_rotary_tables_only(caplog):
    """Every weight sync logged "RotaryEmbedding: Failed to load weights" (its table is derived, never a
    weight); the filter must drop exactly that, and keep the same warning for a layer that lost a weight."""
    install_reload_warning_filter()
    install_reload_warning_filter()  # once per process, however often a sync runs
    logger = logging.getLogger(RELOAD_LOGGER)
    assert len([f for f in logger.filters if getattr(f, "__name__", "") == "drop_derived_layer_warnings"]) == 1
    with caplog.at_level(logging.WARNING, logger=RELOAD_LOGGER):
        logger.warning("%s: Failed to load weights", "RotaryEmbedding")
        logger.warning("%s: Failed to load weights", "QKVParallelLinear")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["QKVParallelLinear: Failed to load weights"]
