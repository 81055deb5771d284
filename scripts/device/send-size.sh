# shellcheck shell=bash
# scripts/device/send-size.sh — sourced HERE by the prepare scripts.
# check_send_size WHO LIMIT_MIB CARRY: says what a device call with CARRY
# sends, as the device tool counts it — the tree (tracked and
# untracked-not-ignored files) plus the carried folder, in bytes — and fails
# when that is over LIMIT_MIB. Bytes, not disk blocks: du's default counts
# every small file as a whole 4 KiB block, which put the f16 carry "over"
# 64 MiB that it does not fill.
check_send_size () {
  local who=$1 limit=$2 carry=$3 tree_b carry_b total_b mib=1048576
  tree_b=$(git ls-files -z --cached --others --exclude-standard |
           du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  carry_b=$(du -sb "$carry" | cut -f1)
  total_b=$(( tree_b + carry_b ))
  awk -v w="$who" -v c="$carry" -v cb="$carry_b" -v tb="$tree_b" -v m=$mib 'BEGIN {
    printf "%s: %s is %.1f MiB, the tree %.1f MiB: %.1f MiB of the 64 MiB a call may send\n", w, c, cb / m, tb / m, (cb + tb) / m }'
  [ "$total_b" -le $(( limit * mib )) ] || { echo "$who: over $limit MiB (the device tool's limit is 64 MiB)" >&2; return 1; }
}
