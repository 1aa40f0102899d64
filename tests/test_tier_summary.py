"""The fast tier's closing lines (tests/conftest.py): what it left out and its test seconds, printed once and
counted right when the tests run on two pytest-xdist workers, where the workers collect and deselect and the
controller prints."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytest.importorskip("xdist")
pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]

SAMPLE = """
import pytest

def test_one():
    pass

def test_two():
    pass

@pytest.mark.slow
def test_long():
    pass

@pytest.mark.server
def test_attach():
    pass
"""


def test_the_summary_is_printed_once_by_the_controller_with_the_workers_counts(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest("from tests.conftest import *  # noqa: F403  (the suite's own hooks)\n")
    pytester.makeini("[pytest]\nmarkers =\n    slow: x\n    server: x\n    wheel: x\n")
    pytester.makepyfile(test_first=SAMPLE, test_second=SAMPLE)
    for name in [n for n in os.environ if n.startswith("PYTEST_XDIST_")]:  # this test may run in a worker itself
        monkeypatch.delenv(name)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider",
                                           "-m", "not slow and not server and not wheel")
    result.assert_outcomes(passed=4)
    out = result.stdout.str()
    assert out.count("fast tier: left out") == 1 and out.count("tests took") == 1
    assert "fast tier: left out 2 llama-server attach, 2 long statistical/model tests" in out  # not 4 and 4
    assert re.search(r"fast tier: 4 tests took \d+ s of test time on 2 workers, \d+ s each", out)
