"""The release receipt has one writer (issue 49 item 2): of every module of src/memworker and
every entry script of the repository, only `memworker.export.receipt` writes
`release-receipt.json`; the export, the evaluator (`--into-receipt`), a waiver and the rebuild
all go through it.

Read with `ast`, as tests/test_import_direction.py reads imports, so nothing runs: a call that
writes a file (`write_json`, `.write_text`, `.write_bytes`, `open`/`.open` for writing,
`shutil.copyfile`/`copy`/`copy2`/`move`, `os.replace`/`rename`, `.rename`/`.replace`) whose target
names the receipt — the `RELEASE_RECEIPT` constant (under any alias), a string holding
`release-receipt.json`, or a name assigned from either in the same function — writes it."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
OWNER = "memworker.export.receipt"
#: the entry scripts' folders (thin scripts above the package)
SCRIPT_DIRS = ("corpus", "eval", "export", "inference", "notebooks", "scripts", "train")

#: writer -> which argument is the file written: "self" (the object the method is called on),
#: or the position of the argument
WRITERS = {"write_json": 0, "write_text": "self", "write_bytes": "self", "copyfile": 1,
           "copy": 1, "copy2": 1, "move": 1, "rename": 0, "replace": 0}
SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)


def _aliases(tree: ast.AST) -> set[str]:
    """The names the module gives the receipt's file name (`RELEASE_RECEIPT as RELEASE`)."""
    names = {"RELEASE_RECEIPT"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names |= {a.asname for a in node.names if a.name == "RELEASE_RECEIPT" and a.asname}
    return names


def _own_nodes(scope: ast.AST):
    """The nodes of a module or function, not those of the functions defined in it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def _names(node: ast.AST, receipt: set[str], tainted: set[str]) -> bool:
    """Whether the expression names the receipt file."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and (sub.id in receipt or sub.id in tainted):
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "RELEASE_RECEIPT":
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) \
                and "release-receipt.json" in sub.value:
            return True
    return False


def _targets(node: ast.AST) -> tuple[list[ast.expr], ast.expr | None]:
    """(names bound, the value they are bound from) of an assignment-like node."""
    if isinstance(node, ast.Assign):
        return node.targets, node.value
    if isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
        return [node.target], node.value
    if isinstance(node, (ast.For, ast.comprehension)):
        return [node.target], node.iter
    if isinstance(node, ast.withitem) and node.optional_vars is not None:
        return [node.optional_vars], node.context_expr
    return [], None


def _written(call: ast.Call) -> ast.expr | None:
    """The file a call writes, or None when it writes none."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else \
        func.attr if isinstance(func, ast.Attribute) else None
    if name == "open":  # open(path, mode) or path.open(mode)
        args = call.args if isinstance(func, ast.Name) else [func.value, *call.args]
        mode = args[1] if len(args) > 1 else next(
            (k.value for k in call.keywords if k.arg == "mode"), None)
        if isinstance(mode, ast.Constant) and isinstance(mode.value, str) \
                and set(mode.value) & set("wax+"):
            return args[0]
        return None
    where = WRITERS.get(name)
    if where is None:
        return None
    if where == "self":
        return func.value if isinstance(func, ast.Attribute) else None
    if name in ("rename", "replace") and isinstance(func, ast.Attribute) \
            and not (isinstance(func.value, ast.Name) and func.value.id == "os"):
        if len(call.args) != 1:  # str.replace(old, new) is not a file
            return None
        return call.args[0]
    if name in ("rename", "replace"):
        where = 1   # os.replace(src, dst)
    return call.args[where] if len(call.args) > where else None


def writes(source: str, where: str) -> list[str]:
    """`where:line` of every write of the release receipt in the Python `source`."""
    tree = ast.parse(source, where)
    receipt = _aliases(tree)
    found = []

    def visit(scope: ast.AST, outer: set[str]) -> None:
        tainted = set(outer)
        nodes = list(_own_nodes(scope))
        for _ in range(3):  # a name assigned from a name assigned from the receipt
            for node in nodes:
                bound, value = _targets(node)
                if value is not None and _names(value, receipt, tainted):
                    tainted |= {n.id for t in bound for n in ast.walk(t)
                                if isinstance(n, ast.Name)}
        for node in nodes:
            if isinstance(node, ast.Call):
                target = _written(node)
                if target is not None and _names(target, receipt, tainted):
                    found.append(f"{where}:{node.lineno}")
            if isinstance(node, SCOPES):
                visit(node, tainted)

    visit(tree, set())
    return sorted(set(found), key=lambda w: int(w.rsplit(":", 1)[1]))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> dict[str, Path]:
    """Every module of src/memworker by name, and every entry script by its path."""
    out = {module_name(p): p for p in sorted((SRC / "memworker").rglob("*.py"))}
    for folder in SCRIPT_DIRS:
        out |= {p.relative_to(ROOT).as_posix(): p for p in sorted((ROOT / folder).rglob("*.py"))}
    return out


SOURCES = sources()
WRITES = {name: w for name, path in SOURCES.items()
          if (w := writes(path.read_text("utf-8"), str(path.relative_to(ROOT))))}


def test_the_release_receipt_has_one_writer():
    assert OWNER in SOURCES and "eval/run.py" in SOURCES and "memworker.eval.summary" in SOURCES
    assert WRITES.get(OWNER), f"{OWNER} writes the receipt, yet the check sees no write there"
    others = {name: w for name, w in WRITES.items() if name != OWNER}
    assert not others, ("the release receipt is written outside " + OWNER + " (call its "
                        "functions instead): " + "; ".join(x for w in others.values() for x in w))


@pytest.mark.parametrize("planted", [
    "write_json(out / RELEASE_RECEIPT, doc)",
    "path = folder / 'release-receipt.json'\npath.write_text(text, 'utf-8')",
    "shutil.copyfile(out / RELEASE_RECEIPT, receipts_dir / RELEASE_RECEIPT)",
    "from memworker.receipts import RELEASE_RECEIPT as RELEASE\n"
    "def f(root):\n    with open(root / RELEASE, 'w') as fh:\n        json.dump({}, fh)",
    "def f(out):\n    p = out / receipts.RELEASE_RECEIPT\n    q = p\n    q.write_bytes(b'')",
    "target = release / RELEASE_RECEIPT\ndef f(tmp):\n    os.replace(tmp, target)",
    "for rel in ['x', RELEASE_RECEIPT]:\n    (out / rel).open('a').write('x')",
])
def test_the_check_sees_a_planted_writer(planted):
    assert writes(textwrap.dedent(planted), "planted.py")


@pytest.mark.parametrize("reader", [
    "doc = json.loads((out / RELEASE_RECEIPT).read_text('utf-8'))",
    "path = out / RELEASE_RECEIPT\nwith open(path) as fh:\n    doc = json.load(fh)",
    "text = (out / RELEASE_RECEIPT).read_text().replace('a', 'b')",
    "def f(out):\n    path = out / RELEASE_RECEIPT\n    return path.read_text()\n"
    "def g(out, doc):\n    path = out / 'summary.json'\n    write_json(path, doc)",
])
def test_reading_the_receipt_is_not_writing_it(reader):
    assert writes(textwrap.dedent(reader), "reader.py") == []
