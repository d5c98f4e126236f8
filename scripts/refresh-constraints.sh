#!/usr/bin/env bash
# Rewrite constraints.txt from the environment that just passed CI (`bash .ci/run`): the exact
# version of every installed distribution the project needs (pyproject.toml's dependencies and
# extras, followed through the installed packages' requirements: scripts/dependency_closure.py;
# anything else in the environment is left out), so `scripts/setup.sh` (pip install -c
# constraints.txt) reproduces it. Local version labels are dropped (torch 2.13.0+cpu ->
# torch==2.13.0, which a CUDA build of the same version also satisfies); the editable memworker
# itself is left out.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
{
  echo "# Exact versions of the environment this file was refreshed in; scripts/setup.sh installs"
  echo "# with -c constraints.txt. Refresh: bash scripts/refresh-constraints.sh, right after"
  echo "# \`bash .ci/run\` passed, in the same environment."
  "$PY" -m pip freeze --exclude-editable | sed -E 's/^([A-Za-z0-9_.-]+==[^+]+)\+.*$/\1/' \
    | "$PY" scripts/dependency_closure.py --filter | LC_ALL=C sort -f
} > constraints.txt
echo "constraints.txt: $(grep -vc '^#' constraints.txt) pins"
