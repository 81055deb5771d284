# scripts/device/fashion-unpack.sh — sourced THERE (the device machine) by
# outer-bench.sh and outer-trace.sh, with C set to a carry that holds
# fashion-mnist/ (prepare-outer.sh makes it): puts Fashion-MNIST where
# rlx-rank reads it, unless it is there already. RLX_FASHION_TO: another
# place (a dry run here).
ds=${RLX_FASHION_TO:-/usr/share/datasets/fashion-mnist}
if [ ! -f "$ds/train-images-idx3-ubyte.gz" ] && [ -d "$C/fashion-mnist" ]; then
  mkdir -p "$ds"
  cp "$C"/fashion-mnist/*-labels-idx1-ubyte.gz "$ds/"
  unpacking=()
  for f in train-images-idx3-ubyte t10k-images-idx3-ubyte; do
    python3 -c "import gzip,lzma,sys; gzip.open(sys.argv[2],'wb',1).write(lzma.open(sys.argv[1]).read())" \
      "$C/fashion-mnist/$f.xz" "$ds/$f.gz" &
    unpacking+=($!)
  done
  # (these two only: a bare wait would also wait for the callers' tee of
  # their log, a process substitution that never ends)
  wait "${unpacking[@]}"
  echo "=== Fashion-MNIST unpacked into $ds"
fi
