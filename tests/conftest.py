"""Shared fixtures, and the CI rule: a missing prerequisite is a failure, not a skip.

Prerequisites (each a fixture that skips with the install command when it is missing):
`embedded_gguf` (the embedded base GGUF, located and sha256-verified by
`memworker.registry.embedded_gguf_path`), `llama_cpp` (the compiled llama-cpp-python), `mlx_lm`
(mlx[cpu] + mlx-lm), `llama_server` (a real `python -m llama_cpp.server` on the embedded base;
`logprob_server`: one that answers `logprobs`).

With `MEMWORKER_REQUIRE_PREREQUISITES=1` (set by `.ci/run`) every skipped test is reported as
failed, naming what is missing, except skips that call `tests.helpers.not_applicable(reason)` (a test that
does not apply to this machine, e.g. a CPU-only check on a GPU machine). Locally, without the
variable, missing prerequisites skip as usual.

`tiny_corpus` (a tiny frozen corpus for the evaluator's tests); tiny-model fixtures for training
runs: `assets` (tiny bases and corpora) and `work` (a working folder laid out like the
repository).
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.tiny import build_tiny_base, build_tiny_corpus
from tests.helpers import NOT_APPLICABLE, free_port

REQUIRE_ENV = "MEMWORKER_REQUIRE_PREREQUISITES"

def _required() -> bool:
    return os.environ.get(REQUIRE_ENV) == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and _required()) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if NOT_APPLICABLE in reason:
        return
    report.outcome = "failed"
    report.longrepr = (f"missing prerequisite ({REQUIRE_ENV}=1 turns this skip into a "
                       f"failure): {reason}")


# --- prerequisites ---------------------------------------------------------------------------

@pytest.fixture(scope="session")
def embedded_gguf() -> Path:
    from memworker.registry import BaseUnavailable, embedded_gguf_path

    try:
        return embedded_gguf_path()
    except BaseUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def llama_cpp():
    try:
        return importlib.import_module("llama_cpp")
    except ImportError:
        pytest.skip("llama-cpp-python is not installed: bash scripts/setup.sh (compiles llama.cpp)")


@pytest.fixture(scope="session")
def mlx_lm():
    try:
        return importlib.import_module("mlx_lm")
    except ImportError:
        pytest.skip('mlx-lm is not installed: pip install "mlx[cpu]" mlx-lm')


def _serve(gguf, log_dir, *extra: str):
    """Run `python -m llama_cpp.server` on `gguf` (with `extra` arguments) on a free local port;
    yields its base URL (without /v1); stops it after."""
    port = free_port()
    log = log_dir / "server.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log, "wb") as sink:  # a file, not a pipe: the server logs a lot and would block
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf),
             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", *extra],
            stdout=sink, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/v1/models", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("llama_cpp.server did not start within 90 s")
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def llama_server(embedded_gguf, llama_cpp, tmp_path_factory):
    """Base URL (without /v1) of a real llama_cpp.server on the embedded base GGUF."""
    yield from _serve(embedded_gguf, tmp_path_factory.mktemp("llama_server"), "--n_threads", "2")


@pytest.fixture(scope="session")
def logprob_server(embedded_gguf, llama_cpp, tmp_path_factory):
    """The same, able to answer `logprobs` (llama_cpp.server needs --logits_all true for it)."""
    yield from _serve(embedded_gguf, tmp_path_factory.mktemp("logprob_server"), "--n_threads",
                      "1", "--logits_all", "true")


# --- tiny corpora and tiny-model training fixtures -------------------------------------------

@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    """A tiny frozen corpus (`tests.fixtures.tiny.build_tiny_corpus`), built once per module."""
    return build_tiny_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="session")
def natural_dev_corpus(tmp_path_factory) -> Path:
    """natural-dev frozen as `python corpus/build.py --natural corpus/natural-dev` freezes it
    (with token counts: ~10 s), once per run: the committed evaluation folders of natural-dev
    recorded `data/natural-dev`, which a clean clone does not have (`data/` is not in git)."""
    from memworker.corpus.natural import build_natural

    out = tmp_path_factory.mktemp("natural-dev") / "natural-dev"
    here = Path.cwd()
    os.chdir(Path(__file__).resolve().parents[1])  # the manifest records the source as given
    try:
        build_natural("corpus/natural-dev", out)
    finally:
        os.chdir(here)
    return out


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("assets")
    return {"base": build_tiny_base(root / "base", seed=0),
            "other_base": build_tiny_base(root / "other", seed=1),
            "qwen3": build_tiny_base(root / "qwen3", arch="qwen3"),
            "general": build_tiny_corpus(root / "corpus", "general", episodes=12),
            "coding": build_tiny_corpus(root / "corpus-coding", "coding", episodes=12)}


@pytest.fixture
def work(tmp_path, monkeypatch, assets):
    """A working folder laid out like the repository: data/corpus, data/corpus-coding."""
    (tmp_path / "data").mkdir()
    shutil.copytree(assets["general"], tmp_path / "data" / "corpus")
    shutil.copytree(assets["coding"], tmp_path / "data" / "corpus-coding")
    monkeypatch.chdir(tmp_path)
    return tmp_path
