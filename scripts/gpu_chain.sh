#!/usr/bin/env bash
# One prepared GPU sitting (issue 47 item 5): the E20 -> E21 -> E22 chain of the 135M student,
# flag for flag, on another registry base, one stage after the other, packed for evaluation on a
# CPU machine.
#
#   OUT=/path/to/out BASE=gemma3-270m BUDGET_S=480 bash scripts/gpu_chain.sh
#
# Needs a CUDA machine with the base's GGUF where the registry finds it (for gemma3-270m the
# joined file in $MEMWORKER_CACHE/ggufs/gemma3-270m/), the training packages of pyproject.toml,
# data/corpus (python corpus/build.py --out data/corpus --seed 13) and data/natural-train
# (python corpus/build.py --natural corpus/natural-train --out data/natural-train). In order:
#   1. the base is prepared (GGUF -> HF folder);
#   2. `coding`: E20's flags (receipts/proof/e20: fresh adapter, the general corpus in the turns
#      form, shares 2:1:1, decision weight 3, lr 4e-4, seed 15, 8,192 tokens a batch), $S1 steps;
#   3. `general-a`: E21's flags (receipts/proof/e21: warm from 2, shares 4:1:1, lr 2e-4, seed 16,
#      4,096 tokens a batch), $S2 steps;
#   4. `general`: E22's flags (receipts/proof/e22: warm from 3, half the train rows from
#      natural-train, max length 2,048), $S3 steps.
#   Stages 3 and 4 keep E21's and E22's step counts (300, 150) when the time left allows them at
#   stage 2's measured seconds a step, else both shrink in that 2:1 ratio (the log says so). Each
#   stage has a --sitting-minutes backstop.
#   5. every stage folder (adapter, receipt, records; no checkpoints) is tarred and split into
#      15 MiB pieces under $OUT with the logs (`cat chain.tar.part-* | tar x` joins them).
set -uo pipefail
: "${OUT:?set OUT}"
. "$(dirname "$0")/pack_runs.sh"
PY=${PYTHON:-python3}
BASE=${BASE:-gemma3-270m}
BUDGET_S=${BUDGET_S:-480}     # seconds from the start until the packing must begin
S1=${S1:-300}; S2=${S2:-300}; S3=${S3:-150}
VAL1=${VAL1:-64}; VAL=${VAL:-16}
T0=$(date +%s)
W=${WORK:-/tmp/chain}
mkdir -p "$OUT" "$W"
log() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/gpu.log"; }
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
minutes() { $PY -c "print(max(0.5, round(($1) / 60, 2)))"; }

log "gpu: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1)"
$PY -c "from memworker import registry; print(registry.prepare('$BASE').path)" > "$W/prepare.log" 2>&1
r=$?
log "base $BASE prepared (rc $r): $(tail -1 "$W/prepare.log")"
[ $r -eq 0 ] || { tail -20 "$W/prepare.log" >> "$OUT/gpu.log"; exit 1; }

COMMON=(--profile cpu-release --base "$BASE" --corpus data/corpus --corpus-domain general
        --lora-layers all --replay-fraction 0 --train-rows 0 --loss-scale epoch
        --extract-form turns --no-export --receipts-dir '' --threads 4 --batch-size 16
        --decision-weight 3 --runs-dir "$W/runs")
stage() {  # stage name, then flags; the backstop is the time left less $RESERVE
    local name=$1; shift
    local m; m=$(minutes "$(left) - ${RESERVE:-30}")
    $PY train/run.py --stage "$name" "${COMMON[@]}" "$@" --sitting-minutes "$m" > "$W/$name.log" 2>&1
    local rc=$?
    log "$name: rc $rc (backstop $m min); $($PY -c "import json; r = json.load(open('$W/runs/$name/receipt.json'))['result']; print({k: r[k] for k in ('global_step', 's_per_step', 'tokens_per_s', 'val_loss', 'runtime_s')})" 2>&1 | tail -1)"
    [ $rc -eq 0 ] && [ -f "$W/runs/$name/receipt.json" ]
}
sps() { $PY -c "import json; print(json.load(open('$W/runs/$1/receipt.json'))['result']['s_per_step'])" 2>/dev/null; }

RESERVE=$(( 60 + 60 )) stage coding --task-shares extract=2,consolidate=1,reflect=1 --seed 15 \
    --lr 4e-4 --max-batch-tokens "${TOK1:-8192}" --max-steps "$S1" --val-rows "$VAL1" \
    --eval-steps $(( (S1 + 2) / 3 )) --save-steps $(( (S1 + 2) / 3 )) || STOP=1
if [ -z "${STOP:-}" ]; then
    # stages 2 and 3: half the tokens a batch of stage 1; sized at 0.75 of its seconds a step,
    # 40 s each for loading and validation, both cut in their 2:1 ratio if they do not fit
    s=$(sps coding)
    fit=$($PY -c "print(int(($(left) - 20 - 80) / (${s:-9} * 0.75)))")
    if [ "$fit" -lt $(( S2 + S3 )) ]; then
        S3=$(( fit * S3 / (S2 + S3) )); S2=$(( fit - S3 ))
        log "general-a, general: E21's and E22's steps do not fit at ${s} s a step: $S2 and $S3"
    fi
    RESERVE=60 stage general-a --task-shares extract=4,consolidate=1,reflect=1 --seed 16 \
        --lr 2e-4 --max-batch-tokens 4096 --max-steps "$S2" --val-rows "$VAL" \
        --eval-steps $(( (S2 + 2) / 3 )) --save-steps $(( (S2 + 2) / 3 )) \
        --parent-run "$W/runs/coding" || STOP=1
fi
if [ -z "${STOP:-}" ]; then
    s=$(sps general-a); fit=$($PY -c "print(int(($(left) - 50) / (${s:-9} * 1.1)))")
    if [ "$fit" -lt "$S3" ]; then log "general: $S3 steps do not fit at ${s} s a step: $fit"; S3=$fit; fi
    RESERVE=10 stage general --task-shares extract=4,consolidate=1,reflect=1 --seed 16 \
        --lr 2e-4 --max-batch-tokens 4096 --max-length 2048 --max-steps "$S3" --val-rows "$VAL" \
        --eval-steps $(( (S3 + 2) / 3 )) --save-steps $(( (S3 + 2) / 3 )) \
        --mix-corpus data/natural-train --mix-share 0.5 --parent-run "$W/runs/general-a" || STOP=1
fi
nvidia-smi --query-gpu=memory.used --format=csv,noheader >> "$OUT/gpu.log" 2>&1

# pack: finished stages keep their folder minus checkpoints; an unfinished one its latest checkpoint
cd "$W" || exit 1
list=()
for name in coding general-a general; do
    pack_stage "runs/$name"
done
pack_out chain
