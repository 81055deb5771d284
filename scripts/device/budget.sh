# scripts/device/budget.sh — sourced THERE by the device scripts, with T0
# (the start, date +%s), BUDGET (seconds) and RESULTS (a .jsonl) set: left
# (seconds of the budget left), say (a timestamped line) and have N WHAT
# (at least N seconds left, else WHAT is logged and recorded as skipped).
left () { echo $(( BUDGET - ($(date +%s) - T0) )); }
say () { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
have () {
  if [ "$(left)" -lt "$1" ]; then
    say "skipped (out of time, $(left)s left): $2"
    echo "{\"skipped\": \"$2\"}" >> "$RESULTS"
    return 1
  fi
}
