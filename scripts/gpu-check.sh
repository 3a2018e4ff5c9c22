#!/usr/bin/env bash
# One command for a lent GPU machine (no network there): the gpu-marked tests, then
# `diageval verify --device cuda --repeats 3` on every case CUDA can run (every non-recorded case; the
# requires: {device: cuda} ones first), within a time budget, then the verify table.
#
#   bash scripts/gpu-check.sh [--dry-run] [--budget SECONDS] [--repeats N]
#
# --dry-run          print the selection and the commands, run nothing (works on any machine)
# --budget SECONDS   total wall-clock budget (default $GPU_CHECK_BUDGET_S, else 480 = 8 min): the tests
#                    get at most a third; verify stops starting cases when the budget is spent, and
#                    the cases not reached are listed as such
# --repeats N        verify repeats (default 3)
# $DIAGEVAL_PYTHON   the interpreter with diageval and a CUDA build of torch installed (default: .venv/bin/python
#                    of the checkout if there is one, else python3); nothing is installed here
# Writes its logs and the table under $GPU_CHECK_OUT (default $OUT when set, else ./runs/gpu-check).
set -uo pipefail
cd "$(dirname "$0")/.."

budget="${GPU_CHECK_BUDGET_S:-480}"
repeats=3
dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --budget) budget="${2:-}"; shift ;;
    --repeats) repeats="${2:-}"; shift ;;
    *) echo "gpu-check: unknown argument $1 (expected --dry-run, --budget SECONDS, --repeats N)" >&2; exit 2 ;;
  esac
  shift
done
case "$budget" in ''|*[!0-9]*) echo "gpu-check: budget must be whole seconds, got '$budget'" >&2; exit 2 ;; esac
case "$repeats" in ''|*[!0-9]*|0) echo "gpu-check: repeats must be a positive integer, got '$repeats'" >&2; exit 2 ;; esac

py="${DIAGEVAL_PYTHON:-}"
[ -z "$py" ] && { [ -x .venv/bin/python ] && py=.venv/bin/python || py=python3; }
out="${GPU_CHECK_OUT:-${OUT:-runs/gpu-check}}"
mkdir -p "$out"
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }

# The selection: non-recorded cases, CUDA-only first. Positive ones are verified; the others (healthy,
# confounder, abstain) are recorded once on CUDA. On the GPU machine (not --dry-run) a case this machine
# cannot record on CUDA (2 ranks on one GPU, a gloo-only injection) is listed with the reason instead.
selection=$(GPU_CHECK_DRY=$dry "$py" - <<'PY'
import os
from diageval.cases.load import load_case_set
cases = [lc.case for lc in load_case_set().cases if lc.case.evidence_kind == "injected"]  # recorded: imported
cases.sort(key=lambda c: (c.requires.device != "cuda", c.id))
for c in cases:
    problem = None
    if os.environ["GPU_CHECK_DRY"] != "1":
        from diageval.recording.record import device_problem
        problem = device_problem("cuda", c)
    action = "skip" if problem else "verify" if c.labels.expect == "diagnose" else "record"
    print(c.id, action, c.requires.device, problem or "")
PY
) || { echo "gpu-check: cannot load the corpus with $py (is diageval installed there?)" >&2; exit 2; }
verify_ids=$(awk '$2 == "verify" {print $1}' <<<"$selection")
record_ids=$(awk '$2 == "record" {print $1}' <<<"$selection")
n_all=$(grep -c . <<<"$selection"); n_verify=$(grep -c . <<<"$verify_ids"); n_record=$(grep -c . <<<"$record_ids")
echo "gpu-check: $n_all non-recorded cases: $n_verify to verify (--repeats $repeats), $n_record to record, budget ${budget}s"
if [ "$dry" = 1 ]; then
  echo "would run: $py -m pytest -m gpu -q -p no:cacheprovider  (timeout $(( budget / 3 ))s)"
  while read -r id what dev _; do
    if [ "$what" = verify ]; then echo "would verify: $id (requires $dev): $py -m diageval verify $id --device cuda --repeats $repeats --json"
    else echo "would record: $id (requires $dev): $py -m diageval record $id --device cuda"; fi
  done <<<"$selection"
  echo "(on the GPU machine, cases it cannot record on CUDA are listed with the reason instead)"
  exit 0
fi
if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu-check: torch sees no CUDA device with $py: nothing to check here" >&2
  exit 2
fi
"$py" -c 'import torch; print("gpu-check: torch", torch.__version__, "on", torch.cuda.device_count(), "x", torch.cuda.get_device_name(0))'

echo "== pytest -m gpu"
timeout $(( budget / 3 )) "$py" -m pytest -m gpu -q -p no:cacheprovider 2>&1 | tee "$out/pytest-gpu.log"
tests_rc=${PIPESTATUS[0]}

echo "== diageval verify --device cuda --repeats $repeats"
: >"$out/verify.jsonl"; : >"$out/verify.notes"
awk '$2 == "skip" {id=$1; $1=$2=$3=""; sub(/^ +/, ""); print id ": skipped, " $0}' <<<"$selection" >>"$out/verify.notes"
not_reached=()
while read -r id action _; do  # in selection order: the CUDA-only cases first
  [ "$action" = skip ] && continue
  t=$(left)
  if [ "$t" -lt 20 ]; then not_reached+=("$id"); continue; fi
  echo "-- $action $id (${t}s left)"
  if [ "$action" = verify ]; then
    timeout "$t" "$py" -m diageval verify "$id" --device cuda --repeats "$repeats" --json </dev/null \
      >>"$out/verify.jsonl" 2>>"$out/verify.notes"
    [ $? = 124 ] && echo "$id: stopped at the budget" >>"$out/verify.notes"
  else  # healthy, confounder and abstain cases: recorded once on CUDA
    if timeout "$t" "$py" -m diageval record "$id" --device cuda </dev/null >>"$out/record.log" 2>&1; then
      echo "$id: recorded on CUDA (expect healthy or abstain: nothing to verify)" >>"$out/verify.notes"
    else
      echo "$id: record error, see record.log" >>"$out/verify.notes"
    fi
  fi
done <<<"$selection"
printf '%s\n' "${not_reached[@]}" | grep . | sed 's/$/: not reached within the budget/' >>"$out/verify.notes"

"$py" - "$out" <<'PY' | tee "$out/table.md"
import json, re, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = [json.loads(l) for l in (out / "verify.jsonl").read_text().splitlines() if l.startswith("{")]
print("| case | metric | healthy | injected | ratio | noise | min_ratio | manifested |")
print("|---|---|---:|---:|---:|---:|---:|---|")
for r in rows:
    print(f"| {r['case']} | {r['metric']} | {r['healthy']*1000:.1f}ms | {r['injected']*1000:.1f}ms | {r['ratio']:.2f} "
          f"| {r['noise']:.2f} | {r['min_ratio']:.2f} | {'yes' if r['manifested'] else 'NO'} |")
notes = [l for l in (out / "verify.notes").read_text().splitlines()
         if re.search(r"skipped|not reached|stopped|recorded on CUDA|[Ee]rror", l)]
for l in notes:
    print(f"| {l.split(':')[0]} | {l.split(':', 1)[1].strip()} | | | | | | |")
PY
failed=$(grep -c '"manifested": false' "$out/verify.jsonl")
echo "gpu-check: tests exit $tests_rc; $(grep -c . "$out/verify.jsonl") verified, $failed did not manifest; $(( $(date +%s) - start ))s"
[ "$tests_rc" = 0 ] && [ "$failed" = 0 ]
