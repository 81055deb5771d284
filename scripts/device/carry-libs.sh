# scripts/device/carry-libs.sh — sourced THERE (the device machine) by the
# device scripts, with C set to the carried .devcarry folder: makes $C/use,
# the carried libraries the machine lacks (a newer one of its own always
# wins), unpacking the packed ones. The wrappers in $C (rlx-rank, bench-gpu,
# …) run our programs with $C/use as their library path.
# grep reads ldconfig's whole list (no -q): a reader that stops at the first
# match SIGPIPEs ldconfig, and under the callers' pipefail a found library
# would read as missing.
rm -rf "$C/use"
mkdir -p "$C/use"
for f in "$C"/lib/*.so*; do
  n=$(basename "$f")
  case $n in
    *.xz) n=${n%.xz}
          ldconfig -p | grep " $n " >/dev/null || xz -dc "$f" > "$C/use/$n" ||
            python3 -c "import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())" \
              "$f" > "$C/use/$n" ;;
    *)    ldconfig -p | grep " $n " >/dev/null || ln -sf "../lib/$n" "$C/use/$n" ;;
  esac
done
