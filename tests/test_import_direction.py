"""Imports run one way (docs/ARCHITECTURE.md): every module of src/memworker imports only modules
of its own part or of a lower layer, and no modules import each other, directly or around a
circle. Read with `ast`, so nothing is imported: an import inside a function counts as much as one
at the top of the file."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: module (or package) -> (layer, part); a module takes the entry of its longest listed prefix.
#: core: the top-level modules (contracts, wire, turns, prompts, verify, temporal, hashing,
#:   receipts, registry, samples, ...) and the package itself, at the bottom;
#: inference: the codec, the backends and the store's worker (the rules arm among them): what the
#:   store runs, so it needs no corpus;
#: corpus: builds and checks rows with the codec's schema (imports inference, never the reverse);
#:   packing (training rows in fewer, longer messages) is part of it;
#: train and eval: the stages, side by side, neither importing the other;
#: export above eval (the release gate reads eval's metrics), never importing training code; the
#:   report (the notebook, read from receipts) and the studies (`memworker.eval.studies`: one-off
#:   measurements through the evaluator's grader and summariser, which never imports them)
#:   beside it;
#: pipeline: the main job, above everything.
LAYERS: dict[str, tuple[int, str]] = {
    "memworker": (0, "core"),
    "memworker.inference": (1, "inference"),
    "memworker.corpus": (2, "corpus"),
    "memworker.packing": (2, "corpus"),
    "memworker.train": (3, "train"),
    "memworker.eval": (3, "eval"),
    "memworker.eval.studies": (4, "studies"),
    "memworker.export": (4, "export"),
    "memworker.report": (4, "report"),
    "memworker.pipeline": (5, "pipeline"),
}
#: lower, yet not to be imported: the export ships a trained model and needs no training code
FORBIDDEN = {("export", "train")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted((SRC / "memworker").rglob("*.py"))}


def layer(module: str) -> tuple[int, str]:
    prefix = max((k for k in LAYERS if module == k or module.startswith(k + ".")), key=len)
    return LAYERS[prefix]


def imports(module: str) -> list[tuple[str, int]]:
    """(imported memworker module, line) for every import statement of `module`, wherever it
    stands; `from package import name` counts as the module `package.name` when there is one."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            out += [(f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source,
                     node.lineno) for a in node.names]
    return [(name, line) for name, line in out
            if name.split(".")[0] == "memworker" and name != module]


GRAPH = {m: imports(m) for m in MODULES}


def upward(graph: dict[str, list[tuple[str, int]]]) -> list[str]:
    problems = []
    for module, targets in graph.items():
        (mine, part) = layer(module)
        for target, line in targets:
            (theirs, other) = layer(target)
            if part == other:
                continue
            if theirs >= mine or (part, other) in FORBIDDEN:
                problems.append(f"{MODULES[module].relative_to(SRC.parent)}:{line}: {module} "
                                f"({part}, layer {mine}) imports {target} ({other}, layer "
                                f"{theirs})")
    return list(dict.fromkeys(problems))


def circles(graph: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """Groups of modules that import each other, directly or around a circle (Tarjan)."""
    edges = {m: sorted({t for t, _ in targets if t in graph}) for m, targets in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        for t in edges[m]:
            if t not in index:
                visit(t)
                low[m] = min(low[m], low[t])
            elif t in stack:
                low[m] = min(low[m], index[t])
        if low[m] == index[m]:
            group = []
            while True:
                t = stack.pop()
                group.append(t)
                if t == m:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for m in edges:
        if m not in index:
            visit(m)
    return found


def test_every_module_has_a_layer_and_is_read():
    assert len(MODULES) > 90 and "memworker.eval.runner" in MODULES
    assert {layer(m)[1] for m in MODULES} == {part for _, part in LAYERS.values()}
    assert "memworker.inference.codec" in {t for t, _ in GRAPH["memworker.eval.runner"]}
    # an import inside a function counts: the backend loads its prefix cache when asked for it
    assert "memworker.inference.kv_prefix" in {t for t, _ in GRAPH["memworker.inference.backends"]}


def test_no_module_imports_a_higher_layer():
    problems = upward(GRAPH)
    assert not problems, "imports that run back up:\n" + "\n".join(problems)


def test_no_modules_import_each_other():
    found = circles(GRAPH)
    assert not found, "modules that import each other (each group a circle): " + "; ".join(
        f"{len(group)} modules: " + ", ".join(group) for group in found)


@pytest.mark.parametrize("planted, part", [
    (("memworker.temporal", "memworker.pipeline"), "core"),
    (("memworker.inference.codec", "memworker.corpus.build"), "inference"),
    (("memworker.train.loop", "memworker.eval.grade"), "train"),
    (("memworker.eval.summary", "memworker.export.gate"), "eval"),
    (("memworker.eval.runner", "memworker.eval.studies.rowtools"), "eval"),
    (("memworker.eval.studies.external", "memworker.export.release"), "studies"),
    (("memworker.export.release", "memworker.train.config"), "export"),
])
def test_the_checks_see_a_planted_upward_import_and_circle(planted, part):
    module, target = planted
    graph = {**GRAPH, module: [*GRAPH[module], (target, 1)]}
    assert any(f"{module} ({part}" in p and f"imports {target} " in p for p in upward(graph))
    graph = {**graph, target: [*graph[target], (module, 1)]}
    assert any(module in group and target in group for group in circles(graph))
