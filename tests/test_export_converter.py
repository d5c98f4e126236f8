"""Obtaining llama.cpp's converter: cached per llama-cpp-python version, unpacked from the sdist,
one-line errors when it cannot be had."""

from __future__ import annotations

import io
import tarfile

import pytest

from memworker.export import converter


def _sdist(path, files: dict[str, bytes]):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_unpack_keeps_only_the_converter_files(tmp_path):
    root = "llama_cpp_python-9.9.9/vendor/llama.cpp/"
    sdist = _sdist(tmp_path / "x.tar.gz", {
        root + "convert_hf_to_gguf.py": b"print('hi')\n",
        root + "conversion/__init__.py": b"",
        root + "gguf-py/gguf/__init__.py": b"",
        root + "src/llama.cpp": b"int main;",
        "llama_cpp_python-9.9.9/llama_cpp/llama.py": b"",
    })
    converter._unpack(sdist, tmp_path / "out")
    got = sorted(p.relative_to(tmp_path / "out").as_posix()
                 for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert got == ["conversion/__init__.py", "convert_hf_to_gguf.py", "gguf-py/gguf/__init__.py"]
    with pytest.raises(converter.ConverterUnavailable, match="holds no vendor/llama.cpp/convert"):
        converter._unpack(_sdist(tmp_path / "y.tar.gz", {root + "README.md": b""}),
                          tmp_path / "out2")


def test_a_cached_converter_is_reused_without_pip(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMWORKER_CACHE", str(tmp_path))
    monkeypatch.delenv(converter.ENV_SRC, raising=False)
    folder = converter.converter_dir("9.9.9")
    folder.mkdir(parents=True)
    (folder / converter.SOURCE_RECORD).write_text("{}")
    monkeypatch.setattr(converter.subprocess, "run", lambda *a, **k: pytest.fail("pip ran"))
    assert converter.ensure_converter("9.9.9") == folder


def test_unobtainable_converter_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMWORKER_CACHE", str(tmp_path))
    monkeypatch.setenv(converter.ENV_SRC, str(tmp_path / "nowhere"))
    with pytest.raises(converter.ConverterUnavailable, match="holds no convert_hf_to_gguf.py"):
        converter.ensure_converter()
    monkeypatch.delenv(converter.ENV_SRC)
    # a version PyPI does not have: pip fails, and the error says what to run
    with pytest.raises(converter.ConverterUnavailable) as info:
        converter.ensure_converter("0.0.0.dev0", quiet=True)
    message = str(info.value)
    assert "\n" not in message and "pip download --no-deps --no-binary :all: " \
        "llama-cpp-python==0.0.0.dev0" in message and converter.ENV_SRC in message
    assert not converter.converter_dir("0.0.0.dev0").exists()
