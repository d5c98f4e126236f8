"""The CI rule of tests/conftest.py: with MEMWORKER_REQUIRE_PREREQUISITES=1 a skipped test (a
missing prerequisite) fails; a not-applicable skip and an xfail stay what they are."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import REQUIRE_ENV

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
INNER = """
import pytest
from tests.helpers import not_applicable

def test_missing_prerequisite():
    pytest.skip("llama-cpp-python is not installed")

def test_not_applicable():
    not_applicable("this machine has a GPU")

def test_passes():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False
"""


def test_ci_turns_a_missing_prerequisite_into_a_failure(pytester, monkeypatch):
    pytester.makeconftest((REPO / "tests" / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(test_inner=INNER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    pytester.runpytest_subprocess().assert_outcomes(passed=1, skipped=2, xfailed=1)
    monkeypatch.setenv(REQUIRE_ENV, "1")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1, failed=1, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines(["*missing prerequisite*llama-cpp-python is not installed*"])
