"""Receipt facts that a chain of stages in one process could get wrong: the git state (the run
writes receipts/ itself) and the peak memory (one process trains several stages)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memworker import receipts
from tests.helpers import NOT_APPLICABLE

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=repo,
                   check=True, capture_output=True)


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    (tmp_path / "receipts").mkdir()
    (tmp_path / "receipts" / "coding-receipt.json").write_text("{}\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "code.py").write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "init")
    return tmp_path


def test_clean_tree_is_not_dirty(repo: Path) -> None:
    state = receipts.git_commit(repo / "src")
    assert len(state["commit"]) == 40
    assert state["dirty"] is False and state["changed"] == []


def test_receipts_written_by_the_run_do_not_make_the_tree_dirty(repo: Path) -> None:
    (repo / "receipts" / "coding-receipt.json").write_text('{"stage": "coding"}\n')
    (repo / "receipts" / "general-receipt.json").write_text("{}\n")
    assert receipts.git_commit(repo / "src")["dirty"] is False  # cwd below the top: still excluded


def test_a_code_change_or_new_file_is_dirty_and_named(repo: Path) -> None:
    (repo / "src" / "code.py").write_text("x = 2\n")
    (repo / "new.txt").write_text("new\n")
    state = receipts.git_commit(repo / "src")
    assert state["dirty"] is True
    assert sorted(state["changed"]) == ["new.txt", "src/code.py"]


def test_outside_a_repository_the_state_is_unknown(tmp_path: Path) -> None:
    state = receipts.git_commit(tmp_path)
    assert state["commit"] is None and state["dirty"] is None


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(),
                    reason=NOT_APPLICABLE + "Linux /proc only")
def test_peak_memory_window_restarts_per_stage() -> None:
    code = (
        "from memworker.train import report\n"
        "report.peak_memory()\n"  # its imports (torch) land before the measured window
        "big = bytearray(400 * 2**20)\n"
        "big[::4096] = b'x' * len(big[::4096])\n"
        "first = report.peak_memory()['rss_bytes']\n"
        "del big\n"
        "scope = report.reset_peak_memory()\n"
        "small = bytearray(20 * 2**20)\n"
        "small[::4096] = b'x' * len(small[::4096])\n"
        "after = report.peak_memory(scope=scope)\n"
        "print(first, after['rss_bytes'], after['rss_scope'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout.split()
    first, after, scope = int(out[0]), int(out[1]), out[2]
    assert scope == "stage"
    assert first > 400 * 2**20
    assert after < first - 300 * 2**20  # the 400 MB of the earlier "stage" is not counted
    assert after > 20 * 2**20
