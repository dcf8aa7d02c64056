"""pytest setup for weft's Python tests. Every test file runs as N ranks under
weftrun (`weftrun -np N python3 -m pytest -x -q tests/test_x.py`); each rank
runs the same tests in the same order, so collectives line up. Expected
values are computed locally from what every rank is known to contribute
(inputs are functions of the rank), never by weft itself: weftref.py
writes out weft's arithmetic (rank-order fold, roundings, scales), so
results are compared exactly, not within a tolerance."""

import importlib
import os

import pytest

import weft

# Set by CMake (WEFT_TESTS_NO_SKIP, on by default where CI is set): every skip
# is then a failure, so a test that cannot run in CI (a module missing, a
# binary not found) fails it instead of passing as "skipped".
NO_SKIP = os.environ.get("WEFT_TESTS_NO_SKIP", "0") not in ("", "0")


def require(module):
    """pytest.importorskip(module), except that under WEFT_TESTS_NO_SKIP the
    missing module fails the file."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if NO_SKIP:
            pytest.fail("cannot import %s (%s), and WEFT_TESTS_NO_SKIP=1 forbids skipping" % (module, e),
                        pytrace=False)
        pytest.skip("cannot import %s: %s" % (module, e), allow_module_level=True)


def _no_skip(report, what):
    if NO_SKIP and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = "%s was skipped, and WEFT_TESTS_NO_SKIP=1 forbids skipping: %s" % (what, report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A module skipped as a whole (pytest.skip at import) fails under
    WEFT_TESTS_NO_SKIP."""
    outcome = yield
    _no_skip(outcome.get_result(), collector.nodeid)


@pytest.fixture(autouse=True)
def world():
    """weft joined (a test may shut it down; the next one joins again)."""
    weft.init()
    yield
    if weft.is_initialized():
        weft.barrier()  # no rank starts the next test's collectives early


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skip fails under WEFT_TESTS_NO_SKIP. A test that fails here aborts
    the job, so the other ranks stop at once with "aborted by rank N: <test>
    failed" instead of waiting for collectives this rank will never issue."""
    outcome = yield
    report = outcome.get_result()
    _no_skip(report, item.nodeid)
    if report.failed and weft.is_initialized():
        weft.abort("%s failed on rank %d" % (item.nodeid, weft.rank()))


def ranks():
    return weft.rank(), weft.size()


def weftrun_path():
    path = os.environ.get("WEFT_TEST_WEFTRUN")
    if not path or not os.path.exists(path):
        pytest.skip("WEFT_TEST_WEFTRUN (path of the weftrun binary) is not set")
    return path
