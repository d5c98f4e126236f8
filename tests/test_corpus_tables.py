"""The corpus tables are data (issue 49, item 4): the YAML files of memworker/corpus/tables, their
loader's checks, and the pins that make a table edit that changes the corpus fail here.

The pins below change only deliberately: a table edit (or a generator change) that changes the
corpus changes them, and whoever makes it rebuilds the default corpora, checks the new rows, and
updates the values here in the same commit (corpus/README.md, "The tables").
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from memworker.corpus import build_corpus, tables
from memworker.corpus.coding import CODING, CODING_POOLS
from memworker.corpus.domains import GENERAL, POOLS
from memworker.corpus.templates import OBS_THEME, T
from memworker.hashing import sha256_file

#: sha256 of the loaded tables, types included (`tables_sha256`): any table edit changes it
TABLES_SHA256 = "c697719010a21751534d31e0435fd9460bac14993f46de6d93a0fabc508ad173"
#: sha256 of manifest.json of `python corpus/build.py --out DIR --seed 13 [--domain coding]`,
#: run where there is no data/natural (the manifest records it when there is one): with token
#: counts (the default; the slow tier rebuilds these) and without (--no-tokens; the fast tier)
DEFAULT_MANIFEST_SHA256 = {
    "general": {"tokens": "932c626620f4c4d88fa485d0029f56c0c39820c23c7caea8d8ae4f9ded804472",
                "no_tokens": "1f8dd447c74b4c9f407bb3f28521048ba1631d81c453c07c9ab968cd61baba54"},
    "coding": {"tokens": "42e3efd9482e14376279270efc74008b4b9f45b8a4e079f8b638e8f305906f7c",
               "no_tokens": "566d06932e49e1a1454859c3851e46acea709e4761396f10482ddfa0ba2d115c"},
}
CHANGED = ("changed: a table or generator edit changed the corpus. If it is meant to, rebuild "
           "the default corpora, review them and update the pins in tests/test_corpus_tables.py")


def _typed(value):
    if dataclasses.is_dataclass(value):
        return [type(value).__name__,
                {f.name: _typed(getattr(value, f.name)) for f in dataclasses.fields(value)}]
    if isinstance(value, (tuple, list)):
        return [type(value).__name__, [_typed(v) for v in value]]
    if isinstance(value, dict):
        return ["dict", [[k, _typed(v)] for k, v in value.items()]]
    return [type(value).__name__, value]


def tables_sha256() -> str:
    """The loaded tables as the generator sees them, with their types (tuple, not list) and order."""
    data = {"POOLS": POOLS, "GENERAL": GENERAL, "CODING_POOLS": CODING_POOLS, "CODING": CODING,
            "T": T, "OBS_THEME": OBS_THEME}
    return hashlib.sha256(json.dumps(_typed(data), ensure_ascii=False).encode()).hexdigest()


def build_default(out: Path, domain: str, count_tokens: bool, monkeypatch) -> str:
    """The default corpus of `domain` built from a folder without data/natural; its manifest's sha256."""
    monkeypatch.chdir(out.parent)
    build_corpus(out, seed=13, domain=domain, count_tokens=count_tokens)
    return sha256_file(out / "manifest.json")


def test_the_tables_load_to_the_pinned_content():
    assert tables_sha256() == TABLES_SHA256, f"the corpus tables {CHANGED}"
    assert len(GENERAL) == 16 and CODING.key == "coding" and CODING.projects == CODING_POOLS["repos"]
    for d in (*GENERAL, CODING):  # tuples, as when the tables were Python: records hash
        assert type(d.attrs) is tuple and all(type(c) is tuple for c in d.chitchat), d.key
        hash((d.attrs, d.pairs, d.multis, d.tool_checks))


def test_every_table_file_has_a_version_and_is_read_by_the_loader():
    files = sorted(p.name for p in tables.TABLES.glob("*.yaml"))
    assert files == ["coding.yaml", "general.yaml", "pools.yaml", "templates.yaml", "voice.yaml"]
    for name in files:
        assert tables.document(tables.TABLES / name)["version"] == tables.VERSION


def test_the_default_coding_corpus_rebuilds_to_its_pinned_manifest(tmp_path, monkeypatch):
    """The general one is pinned in test_corpus.py (its default build is already made there)."""
    sha = build_default(tmp_path / "coding", "coding", False, monkeypatch)
    assert sha == DEFAULT_MANIFEST_SHA256["coding"]["no_tokens"], f"the coding corpus {CHANGED}"


# ------------------------------------------------------------------------- the loader's refusals


@pytest.fixture
def table_copy(tmp_path) -> Path:
    folder = tmp_path / "tables"
    shutil.copytree(tables.TABLES, folder)
    return folder


DELETE = object()
LOADERS = {"templates.yaml": tables.templates, "general.yaml": tables.general_domains,
           "pools.yaml": tables.value_pools, "coding.yaml": tables.coding_domain}
SHARED = "['allergy', 'hobby', 'job', 'lives_in', 'plays', 'speaks', 'works_at']"


@pytest.mark.parametrize(("name", "where", "value", "reason", "key"), [
    ("templates.yaml", ("templates", "story", 2), 3, "expected a non-empty string, got 3",
     "templates.story[2]"),
    ("general.yaml", ("domains", 1, "attrs", 2, "state"), DELETE,
     "missing field 'state' of Attr", "domains[1].attrs[2].state"),
    ("general.yaml", ("domains", 0, "dated", 0, "when"), "today",
     "unknown field 'when' of Dated", "domains[0].dated[0].when"),
    # what an unquoted `no` becomes
    ("pools.yaml", ("pools", "cities", 0), False, "expected a non-empty string, got False",
     "pools.cities[0]"),
    ("general.yaml", ("domains", 0, "attrs", 0), "lives_at",
     f"unknown shared attribute 'lives_at' (shared_attrs has {SHARED})", "domains[0].attrs[0]"),
    ("coding.yaml", ("domain", "attrs", 0, "pool"), "test_runnerz",
     "unknown pool 'test_runnerz'", "domain.attrs[0].pool"),
    ("general.yaml", ("domains", 0, "chitchat", 0), ["a question", "an answer"],
     "expected a mapping (_Chat), got list", "domains[0].chitchat[0]"),
    ("templates.yaml", ("version",), 0, "unsupported version 0 (this code reads version 1)",
     "version"),
    ("templates.yaml", ("templates",), DELETE, "missing table", "templates"),
])
def test_a_malformed_table_is_refused_with_the_reason_the_file_and_the_key(
        table_copy, name, where, value, reason, key):
    path = table_copy / name
    doc = yaml.safe_load(path.read_text("utf-8"))
    parent = doc
    for step in where[:-1]:
        parent = parent[step]
    if value is DELETE:
        del parent[where[-1]]
    else:
        parent[where[-1]] = value
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), "utf-8")
    with pytest.raises(tables.TableError) as caught:
        LOADERS[name](table_copy)
    assert str(caught.value) == f"{reason}: {path}, key {key}"


def test_a_missing_or_unreadable_table_file_is_refused_naming_it(table_copy):
    folder = table_copy
    (folder / "pools.yaml").unlink()
    with pytest.raises(tables.TableError, match=r"^table file is missing: .*pools\.yaml$"):
        tables.general_domains(folder)
    (folder / "templates.yaml").write_text("version: 1\ntemplates: [unclosed\n", "utf-8")
    with pytest.raises(tables.TableError, match=r"^not valid YAML, did not find expected ',' or "
                       r"'\]' at line 3, column 1: .*templates\.yaml$"):
        tables.templates(folder)
