"""Viewer fixtures: headless Chromium, launched once per test module."""
from __future__ import annotations

import pytest
from viewer_helpers import CHROMIUM_ARGS, chromium_path


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield b
        b.close()
