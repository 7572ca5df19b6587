"""The suite's time budget, as a pytest plugin (tests/conftest.py loads it).

Why: the suite once grew by 10-20 minutes in one wave without anyone noticing until CI neared its limit. So
every run ends by printing its slowest tests (set-up and call together, which is what a test costs: a module
fixture's engine start is charged to the first test that needs it) and its whole time, and a run fails when a
test outside `SLOW_ALLOWED` takes longer than the budget. A test that must stay slow goes on that list with
its reason; everything else is made cheaper.

Settings (environment): GIGPO_TEST_BUDGET_S (default 60), GIGPO_TEST_SLOWEST (how many to print, default 25),
GIGPO_TEST_TIMES (a file that gets one "seconds<TAB>outcome<TAB>test" line as each test ends: the costs and
results of a run that may not finish, for docs/benchmarks.md and this list).
Under pytest-xdist the controller (which receives every worker's reports) does the check, once.
"""
from __future__ import annotations

import os
import time
from collections import defaultdict
from typing import Optional

import pytest

BUDGET_S = 60.0

#: Tests allowed past the budget, each with the reason it cannot be cheaper. Keys match a test's node id or
#: its prefix up to "[" (all parametrizations). Measured costs are from a run on a 2-core AVX-512 EPYC.
SLOW_ALLOWED: dict[str, str] = {
}


def budget_s() -> float:
    return float(os.environ.get("GIGPO_TEST_BUDGET_S", BUDGET_S))


def allowed(nodeid: str, listed: dict[str, str]) -> bool:
    return nodeid in listed or nodeid.split("[", 1)[0] in listed


class SuiteBudget:
    """Sums set-up and call time per test and reports the slow ones at the end of the session."""

    def __init__(self, budget: float, listed: dict[str, str], slowest: int, times_file: Optional[str] = None) -> None:
        self.budget = budget
        self.times_file = times_file
        self.listed = listed
        self.slowest = slowest
        self.seconds: dict[str, float] = defaultdict(float)
        self.outcomes: dict[str, str] = {}
        self.started = time.monotonic()

    def over_budget(self) -> list[tuple[str, float]]:
        return sorted(((node, s) for node, s in self.seconds.items()
                       if s > self.budget and not allowed(node, self.listed)), key=lambda item: -item[1])

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when in ("setup", "call"):
            self.seconds[report.nodeid] += report.duration
            if report.failed or report.skipped or report.when == "call":
                self.outcomes[report.nodeid] = report.outcome if report.when == "call" else f"{report.when} {report.outcome}"
        elif report.when == "teardown" and self.times_file:
            outcome = "teardown failed" if report.failed else self.outcomes.get(report.nodeid, "?")
            with open(self.times_file, "a") as out:
                out.write(f"{self.seconds[report.nodeid]:.1f}\t{outcome}\t{report.nodeid}\n")

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.over_budget() and exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter) -> None:
        write = terminalreporter.write_line
        wall = time.monotonic() - self.started
        ranked = sorted(self.seconds.items(), key=lambda item: -item[1])[: self.slowest]
        terminalreporter.section(f"slowest {len(ranked)} tests (set-up + call)")
        for node, seconds in ranked:
            mark = " (listed slow)" if allowed(node, self.listed) else ""
            write(f"{seconds:8.1f} s  {node}{mark}")
        total = sum(self.seconds.values())
        write(f"whole run: {wall:.0f} s wall, {total:.0f} s of test set-up + call, {len(self.seconds)} tests")
        over = self.over_budget()
        if over:
            terminalreporter.section("over the time budget", red=True)
            for node, seconds in over:
                write(f"{seconds:8.1f} s  {node}  (budget {self.budget:.0f} s)", red=True)
            write("make each of these cheaper, or add it to SLOW_ALLOWED in tests/support/budget.py with the "
                  "reason it must stay slow", red=True)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller sums every worker's reports
        return
    slowest = int(os.environ.get("GIGPO_TEST_SLOWEST", 25))
    budget = SuiteBudget(budget_s(), SLOW_ALLOWED, slowest, os.environ.get("GIGPO_TEST_TIMES"))
    config.pluginmanager.register(budget, "gigpo-suite-budget")
