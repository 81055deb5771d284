#!/bin/bash
# scripts/device/cohort-attack.sh — issue 29's keyless attacks (items 1-4:
# 500 idle connections, 200 slowloris, 20 non-reading clients, room
# flooding) against a training cohort's founder on the device machine's 16
# cores: scripts/cohort-attack.py against the carried rlx-rank (CPU
# backend, synthetic data), each attack REPEAT rounds of a window without it
# and a window under it, in one call. Per attack: the founder's RSS growth,
# legitimate signalling joins and a third rank's join time under it, and
# the cohort's samples/s under ÷ without (median of the rounds).
#
#   here:   bash scripts/device/prepare.sh --no-debs &&
#           RLX_PREP_OUT=.devcarry-attack RLX_PREP_DATA=0 bash scripts/device/prepare-outer.sh
#           (.devcarry-chaos, made the same way for scripts/device/chaos.sh, also does)
#   device: command 'bash scripts/device/cohort-attack.sh'  carry [".devcarry-attack"]
#           kind nvidia-h200   timeout_s 600
#
# Knobs: RLX_ATTACK_ATTACKS (idle,slowloris,deaf,rooms), RLX_ATTACK_WINDOW
# (seconds of each window, 10), RLX_ATTACK_REPEAT (rounds per attack, 3),
# RLX_ATTACK_CONTROL=1 (aim the attacks at a lone `rlx-rank signal` instead:
# what the machine's load alone costs the cohort), RLX_ATTACK_THEN (attacks
# run as that control afterwards with the time left, idle; empty: none),
# RLX_ATTACK_RANK (an rlx-rank to use instead of the carried one: a dry run
# here). Everything goes to $OUT: log.txt (the rows as printed),
# attack.jsonl and control.jsonl (one JSON object per attack, each round's
# figures in it).
#
# A small dry run here:
#   OUT=/tmp/da RLX_ATTACK_RANK=build/tools/rlx-rank RLX_ATTACK_ATTACKS=idle \
#   RLX_ATTACK_WINDOW=4 RLX_ATTACK_REPEAT=1 bash scripts/device/cohort-attack.sh
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/log-setup.sh"
root=$(cd "$here/../.." && pwd)
RANK=${RLX_ATTACK_RANK:-}
if [ -z "$RANK" ]; then
  C=${RLX_ATTACK_CARRY:-$PWD/.devcarry-attack}
  [ -x "$C/rlx-rank" ] || C=$PWD/.devcarry-chaos
  [ -x "$C/rlx-rank" ] || { say "no .devcarry-attack/rlx-rank: see the top of this script"; exit 1; }
  cat "$C/MANIFEST" 2>/dev/null
  . "$here/carry-libs.sh"
  RANK=$C/rlx-rank
fi
say "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; $(python3 --version)"
"$RANK" join --help >/dev/null 2>&1 || { say "$RANK does not run"; exit 1; }
# the attacks hold hundreds of sockets (cohort-attack.py raises its own
# soft limit to the hard one; the ranks inherit it)
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
extra=()
[ "${RLX_ATTACK_CONTROL:-0}" = 1 ] && extra+=(--control)
rm -f "$OUT/attack.jsonl" "$OUT/control.jsonl"
attack () {   # attack JSONL TIMEOUT ATTACKS [--control]
  local out=$1 limit=$2 which=$3
  shift 3
  PYTHONUNBUFFERED=1 timeout "$limit" python3 "$root/scripts/cohort-attack.py" \
    --rank "$RANK" --attacks "$which" \
    --window "${RLX_ATTACK_WINDOW:-10}" --repeat "${RLX_ATTACK_REPEAT:-3}" \
    --json-out "$OUT/$out" "$@"
}
attack attack.jsonl "${RLX_ATTACK_TIMEOUT:-430}" "${RLX_ATTACK_ATTACKS:-idle,slowloris,deaf,rooms}" \
  "${extra[@]}"
rc=$?
say "cohort-attack.py exit $rc (1: a figure misses the bar; 124: out of time)"
# then, with the time left (the call's 570 s), the control: the same
# attacks (RLX_ATTACK_THEN, default idle; empty: none) at a lone signalling
# server, so the cohort shares only the machine with them
then=${RLX_ATTACK_THEN-idle}
left=$(( ${RLX_ATTACK_BUDGET:-570} - ($(date +%s) - T0) ))
if [ -n "$then" ] && [ "${RLX_ATTACK_CONTROL:-0}" != 1 ]; then
  if [ "$left" -gt 110 ]; then
    say "control: $then at a lone rlx-rank signal (${left} s left)"
    attack control.jsonl "$((left - 10))" "$then" --control
    say "control exit $?"
  else
    say "no time left for the control (${left} s)"
  fi
fi
exit $rc
