"""pytest setup for weft's Python tests. Every test file runs as N ranks under
weftrun (`weftrun -np N python3 -m pytest -x -q tests/test_x.py`); each rank
runs the same tests in the same order, so collectives line up. Expected
values are computed locally from what every rank is known to contribute
(inputs are functions of the rank), never by weft itself."""

import os

import pytest

import weft


@pytest.fixture(autouse=True)
def world():
    """weft joined (a test may shut it down; the next one joins again)."""
    weft.init()
    yield
    if weft.is_initialized():
        weft.barrier()  # no rank starts the next test's collectives early


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that fails here aborts the job, so the other ranks stop at once
    with "aborted by rank N: <test> failed" instead of waiting for
    collectives this rank will never issue."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and weft.is_initialized():
        weft.abort("%s failed on rank %d" % (item.nodeid, weft.rank()))


def ranks():
    return weft.rank(), weft.size()


def weftrun_path():
    path = os.environ.get("WEFT_TEST_WEFTRUN")
    if not path or not os.path.exists(path):
        pytest.skip("WEFT_TEST_WEFTRUN (path of the weftrun binary) is not set")
    return path
