"""Helpers shared by several test packages (tests/ is on sys.path through the root conftest.py)."""
