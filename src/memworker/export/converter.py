"""llama.cpp's own HF → GGUF converter, pinned to the installed llama-cpp-python.

The installed wheel does not contain `convert_hf_to_gguf.py`; the llama-cpp-python source
distribution vendors it together with its `conversion/` package and its own `gguf-py` (PyPI's
`gguf` does not match it; FACTS.md § llama.cpp). `ensure_converter()` downloads that sdist once
with pip (`pip download --no-deps --no-binary :all: llama-cpp-python==<installed version>`),
unpacks only the converter files into `$MEMWORKER_CACHE/llama-cpp-src/<version>/` (default
`~/.cache/memworker`) and reuses them afterwards. `MEMWORKER_LLAMA_CPP_SRC` may name an
unpacked llama.cpp source folder instead (offline machines). `convert()` runs the script in a
subprocess with the vendored `gguf-py` first on `PYTHONPATH`.

    python -m memworker.export.converter      # fetch (if needed) and print the converter folder
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from memworker.hashing import sha256_file
from memworker.registry import cache_root

SCRIPT = "convert_hf_to_gguf.py"
# what the converter needs from the sdist's vendor/llama.cpp/ (paths relative to it)
MEMBERS = (SCRIPT, "conversion/", "gguf-py/", "LICENSE")
SOURCE_RECORD = "memworker-source.json"
ENV_SRC = "MEMWORKER_LLAMA_CPP_SRC"
ENV_PRE = "MEMWORKER_TOKENIZER_PRE"  # default for `pre_tokenizer` (tests of the tiny local base)

# Runs the converter with one BPE pre-tokenizer name forced (`pre_tokenizer=`, or $ENV_PRE): for
# a local base whose tokenizer llama.cpp's hash table does not know (the tiny test base: its BPE
# is trained in the test, so no known hash matches; its pre-tokenizer is GPT-2's byte-level
# regex, llama.cpp's "gpt-2"). Never needed for the registry bases, which the converter knows.
_FORCE_PRE = (
    "import runpy, sys\n"
    "import conversion.base as base\n"
    "pre = sys.argv.pop(1)\n"
    "base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


class ConverterUnavailable(RuntimeError):
    """The converter cannot be had here; the message is one line saying what to do."""


class ConversionFailed(RuntimeError):
    """The converter ran and failed; the message names its last error line and the log."""


def llama_cpp_version() -> str:
    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        raise ConverterUnavailable("llama-cpp-python is not installed: pip install "
                                   "'memworker[export]' (it compiles llama.cpp, ~10 min)") from None


def converter_dir(version: str | None = None) -> Path:
    return cache_root() / "llama-cpp-src" / (version or llama_cpp_version())


def _pip_hint(version: str) -> str:
    return f"pip download --no-deps --no-binary :all: llama-cpp-python=={version}"


def ensure_converter(version: str | None = None, quiet: bool = False) -> Path:
    """Folder holding `convert_hf_to_gguf.py`, `conversion/` and `gguf-py/` for `version`
    (default: the installed llama-cpp-python), downloading and unpacking it on first use."""
    override = os.environ.get(ENV_SRC)
    if override:
        folder = Path(override)
        if not (folder / SCRIPT).is_file() or not (folder / "gguf-py").is_dir():
            raise ConverterUnavailable(f"{ENV_SRC}={override} holds no {SCRIPT} and gguf-py/; "
                                       "point it at an unpacked llama.cpp source folder")
        return folder
    version = version or llama_cpp_version()
    folder = converter_dir(version)
    if (folder / SOURCE_RECORD).is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{version}-") as tmp:
        tmp = Path(tmp)
        if not quiet:
            print(f"export: fetching llama.cpp's converter (llama-cpp-python {version} sdist, "
                  f"once) into {folder}", file=sys.stderr)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", "-d", str(tmp / "dl"),
               f"llama-cpp-python=={version}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        sdists = sorted((tmp / "dl").glob("llama_cpp_python-*.tar.gz"))
        if proc.returncode != 0 or not sdists:
            last = _last_line(proc.stderr or proc.stdout) or "no sdist downloaded"
            raise ConverterUnavailable(
                f"cannot obtain llama.cpp's converter: `{_pip_hint(version)}` failed ({last}); "
                f"run it where PyPI is reachable and set {ENV_SRC} to the unpacked "
                "vendor/llama.cpp folder")
        unpacked = tmp / "src"
        _unpack(sdists[0], unpacked)
        record = {"llama_cpp_python": version, "sdist": sdists[0].name,
                  "sdist_sha256": sha256_file(sdists[0]),
                  "script_sha256": sha256_file(unpacked / SCRIPT)}
        (unpacked / SOURCE_RECORD).write_text(json.dumps(record, indent=2) + "\n", "utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        unpacked.rename(folder)
    return folder


def _unpack(sdist: Path, out: Path) -> None:
    with tarfile.open(sdist, "r:gz") as tar:
        chosen = []
        for member in tar.getmembers():
            parts = member.name.split("/", 3)  # <pkg>-<v>/vendor/llama.cpp/<rel>
            if len(parts) < 4 or parts[1:3] != ["vendor", "llama.cpp"]:
                continue
            rel = parts[3]
            if any(rel == m or (m.endswith("/") and rel.startswith(m)) for m in MEMBERS):
                member.name = rel
                chosen.append(member)
        if not any(m.name == SCRIPT for m in chosen):
            raise ConverterUnavailable(f"{sdist.name} holds no vendor/llama.cpp/{SCRIPT}; this "
                                       "llama-cpp-python version cannot be used for export")
        tar.extractall(out, members=chosen, filter="data")


def source_record(folder: Path) -> dict[str, Any]:
    """What the release receipt records of the converter (version, sdist and script sha256)."""
    path = folder / SOURCE_RECORD
    record = json.loads(path.read_text("utf-8")) if path.is_file() else {"source": str(folder)}
    record.setdefault("script_sha256", sha256_file(folder / SCRIPT))
    return record


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def convert(hf_dir: Path, out_file: Path, *, outtype: str = "q8_0",
            gguf_metadata: dict[str, Any] | None = None, model_name: str | None = None,
            pre_tokenizer: str | None = None, log: Path | None = None) -> dict[str, Any]:
    """Convert the HF folder `hf_dir` into `out_file` with llama.cpp's converter; returns the
    command record (arguments, seconds). Raises ConversionFailed naming the last error line."""
    folder = ensure_converter()
    pre_tokenizer = pre_tokenizer or os.environ.get(ENV_PRE) or None
    args = [str(hf_dir), "--outfile", str(out_file), "--outtype", outtype]
    work = Path(tempfile.mkdtemp(prefix="memworker-convert-"))
    try:
        if gguf_metadata:
            meta = work / "metadata.json"
            meta.write_text(json.dumps(gguf_metadata, indent=2), "utf-8")
            args += ["--metadata", str(meta)]
        if model_name:
            args += ["--model-name", model_name]
        script = str(folder / SCRIPT)
        cmd = ([sys.executable, "-c", _FORCE_PRE, pre_tokenizer, script, *args] if pre_tokenizer
               else [sys.executable, script, *args])
        env = dict(os.environ)
        env.pop("NO_LOCAL_GGUF", None)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(folder / "gguf-py"), str(folder)] + ([env["PYTHONPATH"]]
                                                     if env.get("PYTHONPATH") else []))
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        seconds = round(time.perf_counter() - started, 2)
        if log is not None:
            log.write_text(proc.stdout + proc.stderr, "utf-8")
        if proc.returncode != 0 or not out_file.is_file():
            where = f" (full log: {log})" if log is not None else ""
            raise ConversionFailed(f"llama.cpp's converter failed on {hf_dir}: "
                                   f"{_last_line(proc.stderr) or 'no output'}{where}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"script": SCRIPT, "outtype": outtype, "pre_tokenizer": pre_tokenizer,
            "seconds": seconds, **source_record(folder)}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m memworker.export.converter",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    try:
        folder = ensure_converter()
    except ConverterUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"converter: {folder / SCRIPT} ({json.dumps(source_record(folder))})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
