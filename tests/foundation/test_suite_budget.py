"""The suite's time budget (tests/support/budget.py): a test made slow on purpose fails the run, unless it is
listed with a reason; every run prints its slowest tests and its whole time. Inner pytest sessions, in process."""
from __future__ import annotations

import re
from collections import namedtuple

import pytest

SLOW_TEST = """
import time

def test_quick():
    pass

def test_made_slow():
    time.sleep(0.6)
"""


@pytest.fixture
def slow_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(test_slow=SLOW_TEST)
    monkeypatch.setenv("GIGPO_TEST_BUDGET_S", "0.3")
    monkeypatch.delenv("GIGPO_TEST_TIMES", raising=False)  # the outer run's file (CI sets one) is not the inner runs'
    return pytester


def run_inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.RunResult:
    """Only the budget plugin in the inner session: installed plugins (xdist, timeout, hypothesis) cost seconds to load."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("GIGPO_TEST_SUITE_PID", raising=False)  # an inner session in this process checks its own budget
    return pytester.runpytest_inprocess("-p", "support.budget", "-p", "no:cacheprovider")


def test_a_test_over_the_budget_fails_the_run_and_is_named(slow_suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    times = slow_suite.path / "times.tsv"
    monkeypatch.setenv("GIGPO_TEST_TIMES", str(times))
    result = run_inner(slow_suite, monkeypatch)
    result.assert_outcomes(passed=2)  # both tests pass; the run fails on the budget alone
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    text = result.stdout.str()
    assert "over the time budget" in text
    over = text.split("over the time budget", 1)[1]
    assert "test_slow.py::test_made_slow" in over and "test_quick" not in over
    assert "whole run:" in text and "slowest 2 tests" in text
    assert re.search(r"machine: \d+ cores, \d+% busy over the run, load average [\d.]+ at its end", text), text
    written = {test: (float(seconds), outcome) for seconds, outcome, test in
               (line.split("\t") for line in times.read_text().splitlines())}
    assert set(written) == {"test_slow.py::test_quick", "test_slow.py::test_made_slow"}
    assert written["test_slow.py::test_made_slow"][0] >= 0.6 > written["test_slow.py::test_quick"][0]
    assert {outcome for _, outcome in written.values()} == {"passed"}


def test_a_listed_slow_test_passes_and_is_marked(slow_suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    import support.budget as budget

    monkeypatch.setitem(budget.SLOW_ALLOWED, "test_slow.py::test_made_slow", "sleeps on purpose")
    result = run_inner(slow_suite, monkeypatch)
    assert result.ret == pytest.ExitCode.OK
    text = result.stdout.str()
    assert "over the time budget" not in text
    assert "test_made_slow (listed slow)" in text


def test_a_pytest_that_a_test_starts_in_a_subprocess_leaves_the_budget_to_the_outer_run(
        slow_suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("GIGPO_TEST_SUITE_PID", "1")  # as a child of the suite's process sees it
    result = slow_suite.runpytest_inprocess("-p", "support.budget", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK
    assert "over the time budget" not in result.stdout.str()


def test_a_failing_run_keeps_its_failure_status(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_fail="import pytest\n\ndef test_fails():\n    assert False\n\n"
                                  "def test_skips():\n    pytest.skip('no GPU')\n")
    times = pytester.path / "times.tsv"
    monkeypatch.setenv("GIGPO_TEST_TIMES", str(times))
    result = run_inner(pytester, monkeypatch)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "over the time budget" not in result.stdout.str()
    outcomes = {line.split("\t")[2]: line.split("\t")[1] for line in times.read_text().splitlines()}
    assert outcomes == {"test_fail.py::test_fails": "failed", "test_fail.py::test_skips": "skipped"}


def test_the_busy_share_counts_neither_idle_nor_io_wait_as_work() -> None:
    from support.budget import busy_share

    Times = namedtuple("Times", "user system idle iowait")
    before, after = Times(10, 5, 80, 5), Times(50, 15, 120, 15)  # 50 s of work, 50 s idle or waiting
    assert busy_share(before, after) == pytest.approx(0.5)
    assert busy_share(before, before) == 0.0
    Linux = namedtuple("Linux", "user system idle iowait guest guest_nice")  # guest time is inside user already
    assert busy_share(Linux(10, 5, 80, 5, 0, 0), Linux(50, 15, 120, 15, 20, 0)) == pytest.approx(0.5)
