"""docs/architecture.md stays true of the code: the files it says a step passes through exist and are at
most five, and its package table names exactly the packages in gigpo/. A rename or a new package fails
here until the page is edited. The page is read as text (no imports), so this takes milliseconds."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
MAX_STEP_FILES = 5


def marked_lines(text: str, marker: str) -> list[str]:
    """The lines between `<!-- {marker}: begin ... -->` and `<!-- {marker}: end -->`."""
    found = re.search(rf"<!-- {marker}: begin[^\n]*-->\n(.*?)<!-- {marker}: end -->", text, re.S)
    if found is None:
        raise AssertionError(f"{DOC.name} has no '<!-- {marker}: begin -->' ... '<!-- {marker}: end -->' block")
    return [line for line in found.group(1).splitlines() if line.strip()]


def first_path(line: str) -> str:
    """The first `gigpo/...` path in backticks on a line."""
    found = re.search(r"`(gigpo/[^`]*)`", line)
    if found is None:
        raise AssertionError(f"{DOC.name}: no `gigpo/...` path in backticks on the line {line!r}")
    return found.group(1).rstrip("/")


def step_files(text: str) -> list[str]:
    """The numbered list of the step's files, one path per item."""
    return [first_path(line) for line in marked_lines(text, "step-files") if re.match(r"\d+\.", line)]


def package_rows(text: str) -> list[str]:
    """The package column of the package table (its header and rule left out)."""
    rows = [line for line in marked_lines(text, "packages") if line.startswith("|") and "`gigpo/" in line]
    return [first_path(row) for row in rows]


def code_packages() -> set[str]:
    """gigpo's top-level packages: its folders with an __init__.py."""
    return {f"gigpo/{p.parent.name}" for p in (ROOT / "gigpo").glob("*/__init__.py")}


def test_the_step_is_traced_in_at_most_five_files_that_exist():
    files = step_files(DOC.read_text())
    assert files, "the step-files list is empty"
    assert len(files) <= MAX_STEP_FILES, f"{len(files)} step files, at most {MAX_STEP_FILES}: {files}"
    missing = [f for f in files if not (ROOT / f).is_file()]
    assert not missing, f"{DOC.name} names step files that do not exist (renamed or moved?): {missing}"


def test_the_package_table_names_every_package_and_only_packages():
    listed = package_rows(DOC.read_text())
    assert len(listed) == len(set(listed)), f"a package is listed twice: {listed}"
    not_packages = sorted(set(listed) - code_packages())
    assert not not_packages, f"{DOC.name} lists packages that do not exist in gigpo/: {not_packages}"
    unlisted = sorted(code_packages() - set(listed))
    assert not unlisted, f"{DOC.name}'s package table does not say what these packages own: {unlisted}"


def test_the_parser_reads_a_list_and_a_table_and_refuses_a_missing_block():
    text = ("<!-- step-files: begin (note) -->\n1. `gigpo/a.py`: x\n2. `gigpo/b/c.py` and `gigpo/d.py`\n"
            "<!-- step-files: end -->\n<!-- packages: begin -->\n| package | owns |\n|---|---|\n"
            "| `gigpo/envs` | envs |\n| `gigpo/infra/` | helpers |\n<!-- packages: end -->\n")
    assert step_files(text) == ["gigpo/a.py", "gigpo/b/c.py"]
    assert package_rows(text) == ["gigpo/envs", "gigpo/infra"]
    with pytest.raises(AssertionError, match="step-files: begin"):
        step_files("no markers here")
