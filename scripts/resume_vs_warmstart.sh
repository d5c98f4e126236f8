#!/usr/bin/env bash
# Issue 26 item 1: when a stage does not fit one sitting, which loses less on val — resuming the
# stopped stage exactly (adapter + optimizer + scheduler + data position, `train/sitting.py save`
# then `restore`), or ending the sitting with a finished shorter stage and warm-starting a new
# stage from its adapter (what a checkpoint too big for the tree leaves: LoRA on all 30 layers
# with its AdamW moments is 59 MB, train/README "Training across sittings")?
#
#   R (resume): one stage of N steps; sitting 1 stops itself after SITTING_MIN minutes (status
#     3), its checkpoint is saved to a folder, the run folder is deleted (a new sitting has no
#     runs/), restored from the saved folder with every sha256 checked, and the same command
#     resumes it to step N.
#   W (warm start): a finished stage of K steps (K = the step R's first sitting stopped at), then
#     a second stage of N - K steps warm-started from its adapter (`--parent-run`): a new
#     optimizer, a new warm-up and cosine schedule, and the train rows from the start of the
#     same seeded order.
# Both train the same LoRA (all 30 layers, turns form, the E20 lever settings scaled to the CPU)
# on the general train split and validate on the same VAL_ROWS val rows. Prints each arm's val
# losses; the run folders stay under OUT.
#
#   OUT=/tmp/item1 bash scripts/resume_vs_warmstart.sh      # ~25 min on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to a work folder (outside the repo)}"
PY=${PYTHON:-python}
N=${STEPS:-40}
SITTING_MIN=${SITTING_MIN:-4}
mkdir -p "$OUT"
COMMON=(--profile cpu-release --corpus data/corpus --corpus-domain general --lora-layers all
        --replay-fraction 0 --train-rows 0 --loss-scale epoch
        --task-shares extract=2,consolidate=1,reflect=1 --extract-form turns --decision-weight 3
        --seed 15 --lr 4e-4 --batch-size 8 --max-batch-tokens 2560
        --val-rows "${VAL_ROWS:-32}" --eval-steps 10 --save-steps 5
        --no-export --no-eval --receipts-dir '' --threads "${THREADS:-2}")

# R, sitting 1: stops with status 3
rc=0
$PY train/run.py --stage coding "${COMMON[@]}" --max-steps "$N" --runs-dir "$OUT/r" \
    --sitting-minutes "$SITTING_MIN" > "$OUT/r1.log" 2>&1 || rc=$?
[ "$rc" -eq 3 ] || { echo "R sitting 1: expected status 3 (stopped), got $rc" >&2; tail -20 "$OUT/r1.log" >&2; exit 1; }
rm -rf "$OUT/r-saved"
$PY train/sitting.py save --run "$OUT/r/coding" --to "$OUT/r-saved" --max-mb 100 > "$OUT/r-save.log" 2>&1
K=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))[-1]['to_step'])" "$OUT/r/coding/sittings.json")
rm -rf "$OUT/r"
$PY train/sitting.py restore --from "$OUT/r-saved" --run "$OUT/r/coding" > "$OUT/r-restore.log" 2>&1
# R, sitting 2: the same command resumes to step N
$PY train/run.py --stage coding "${COMMON[@]}" --max-steps "$N" --runs-dir "$OUT/r" \
    --sitting-minutes 600 > "$OUT/r2.log" 2>&1
echo "R: stopped at step $K in sitting 1, resumed to $N"

# W: a finished stage of K steps, then a warm-started stage of N - K steps
$PY train/run.py --stage coding "${COMMON[@]}" --max-steps "$K" --runs-dir "$OUT/w" \
    > "$OUT/w1.log" 2>&1
$PY train/run.py --stage general-a "${COMMON[@]}" --max-steps $(( N - K )) --runs-dir "$OUT/w" \
    --parent-run "$OUT/w/coding" > "$OUT/w2.log" 2>&1

$PY - "$OUT" "$K" <<'EOF'
import json, sys
from pathlib import Path
out, k = Path(sys.argv[1]), int(sys.argv[2])
def curve(run, offset=0):
    history = json.loads((run / "trainer_state.json").read_text())["log_history"]
    return [(offset + e["step"], round(e["eval_loss"], 4)) for e in history if "eval_loss" in e]
for name, run, offset in (("R  (resumed)", out / "r/coding", 0),
                          ("W1 (first stage)", out / "w/coding", 0),
                          ("W2 (warm start)", out / "w/general-a", k)):
    result = json.loads((run / "receipt.json").read_text())["result"]
    print(f"{name}: val loss at step {curve(run, offset)}; final {result['val_loss']:.4f}, "
          f"{result['global_step']} steps, {result['s_per_step']} s/step")
EOF
