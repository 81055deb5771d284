# scripts/device/fashion-unpack.sh — sourced THERE (the device machine) by
# outer-bench.sh and outer-trace.sh, with C set to a carry that holds
# fashion-mnist/ (prepare-outer.sh makes it): puts Fashion-MNIST where
# rlx-rank reads it, unless it is there already. RLX_FASHION_TO: another
# place (a dry run here).
ds=${RLX_FASHION_TO:-/usr/share/datasets/fashion-mnist}
if [ ! -f "$ds/train-images-idx3-ubyte.gz" ] && [ -d "$C/fashion-mnist" ]; then
  mkdir -p "$ds"
  cp "$C"/fashion-mnist/*-labels-idx1-ubyte.gz "$ds/"
  # one after the other, in the foreground, as outer-bench.sh did before
  # (07:15 UTC: unpacked in 2 s): the two side by side in the background
  # with a wait for them stalled a device call at this point for its whole
  # 300 s (2026-12-02 08:04 UTC, cause not found; locally they finish)
  for f in train-images-idx3-ubyte t10k-images-idx3-ubyte; do
    python3 -c "import gzip,lzma,sys; gzip.open(sys.argv[2],'wb',1).write(lzma.open(sys.argv[1]).read())" \
      "$C/fashion-mnist/$f.xz" "$ds/$f.gz"
  done
  echo "=== Fashion-MNIST unpacked into $ds"
fi
