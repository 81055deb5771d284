#!/bin/bash
# scripts/device/prepare-outer.sh — run HERE, after scripts/device/prepare.sh:
# makes .devcarry-cpu/, what scripts/device/outer-bench.sh needs on the
# device machine and nothing else, so that Fashion-MNIST fits in the device
# tool's 64 MiB beside the tree (.devcarry with the dataset would not):
#
#   .devcarry-cpu/bin/rlx-rank, rlx-rank (the wrapper), lib/ (rlx-rank's
#   libraries and OpenBLAS's, as .devcarry has them), torch_ref.py, MANIFEST
#   .devcarry-cpu/fashion-mnist/  the four idx files, the images as .xz
#                                 (outer-bench.sh unpacks them to the path
#                                 rlx-rank reads, /usr/share/datasets/…)
#
# Device call: command 'bash scripts/device/outer-bench.sh', carry
# [".devcarry-cpu"], kind nvidia-h200 (16 cores), timeout_s 600.
#
# RLX_PREP_OUT=DIR makes DIR instead of .devcarry-cpu; RLX_PREP_DATA=0 leaves
# the dataset out (what scripts/device/chaos.sh needs: the synthetic data);
# RLX_PREP_NET=1 adds .devcarry/net (ip and tc: chaos.sh with --netns).
set -euo pipefail
die () { echo "prepare-outer.sh: $*" >&2; exit 1; }
root=$(git rev-parse --show-toplevel 2>/dev/null) || die "run it inside the rlx-cluster checkout"
cd "$root"
src=.devcarry
out=${RLX_PREP_OUT:-.devcarry-cpu}
with_data=${RLX_PREP_DATA:-1}
data=${RLX_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$src/bin/rlx-rank" ] || die "no $src/bin/rlx-rank: run scripts/device/prepare.sh first"
exclude=$(git rev-parse --git-path info/exclude)
grep -qxF "/$out/" "$exclude" 2>/dev/null || echo "/$out/" >> "$exclude"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
cp "$src/bin/rlx-rank" "$out/bin/"
cp "$src/rlx-rank" "$src/torch_ref.py" "$out/"
# rlx-rank's libraries and OpenBLAS's (and theirs), packed or not as in $src
need=$(ldd "$src/bin/rlx-rank" | awk '/=> \// { print $1 }')
blas=$(ldconfig -p | awk '/libopenblas\.so\.0 .*x86-64/ && !found { print $NF; found = 1 }')
[ -n "$blas" ] && need="$need $(ldd "$blas" | awk '/=> \// { print $1 }') libopenblas.so.0"
for n in $need; do
  for f in "$src/lib/$n" "$src/lib/$n.xz"; do
    [ -e "$f" ] && cp "$f" "$out/lib/"
  done
done
[ -e "$out/lib/libopenblas.so.0.xz" ] || die "$src/lib has no libopenblas.so.0.xz"
# the dataset: labels as they are, images repacked with xz (26 MB, not 31)
if [ "$with_data" = 1 ]; then
  mkdir -p "$out/fashion-mnist"
  for f in train-labels-idx1-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    [ -f "$data/$f" ] || die "$data/$f missing (apt install dataset-fashion-mnist)"
    cp "$data/$f" "$out/fashion-mnist/"
  done
  for f in train-images-idx3-ubyte t10k-images-idx3-ubyte; do
    [ -f "$data/$f.gz" ] || die "$data/$f.gz missing (apt install dataset-fashion-mnist)"
    zcat "$data/$f.gz" | xz -T0 -9e -c > "$out/fashion-mnist/$f.xz"
  done
fi
# iproute2's ip (and tc), for chaos.sh --netns: RLX_PREP_NET=1
if [ "${RLX_PREP_NET:-0}" = 1 ]; then
  [ -x "$src/net/ip" ] || die "no $src/net/ip: run scripts/device/prepare.sh (this version) first"
  cp -r "$src/net" "$out/"
fi
{ cat "$src/MANIFEST"; echo "cpu carry made $(date -u +%FT%TZ) from $src"; } > "$out/MANIFEST"

# check: every library rlx-rank needs resolves from the carry
check=$(mktemp -d)
for f in "$out/lib/"*; do
  case $f in *.xz) xz -dc "$f" > "$check/$(basename "${f%.xz}")" ;; *) cp "$f" "$check/" ;; esac
done
missing=$(LD_LIBRARY_PATH="$check" ldd "$out/bin/rlx-rank" | awk '/not found/' || true)
rm -rf "$check"
[ -z "$missing" ] || die "unresolved libraries: $missing"

. scripts/device/send-size.sh
check_send_size prepare-outer.sh 63 "$out" || die "send less (or carry less)"
echo "prepare-outer.sh: ready. Device call: command 'bash scripts/device/outer-bench.sh' (chaos.sh without the dataset), carry [\"$out\"], kind nvidia-h200, timeout_s 600"
