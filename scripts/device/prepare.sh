#!/bin/bash
# scripts/device/prepare.sh — run HERE, in the checkout whose tree the device
# tool sends (the lead's), before a device call: builds a release rlx-rank and
# bench-gpu and gathers, in .devcarry/ (git-ignored through .git/info/exclude),
# everything scripts/device/gpu-cohort.sh needs on the device machine, whose
# image (Ubuntu-like, CUDA, python3 + torch) has no GLib, json-glib, OpenBLAS
# or Vulkan loader of its own:
#
#   .devcarry/bin/       rlx-rank, bench-gpu, test-resident, test-round, test-compute, remote-bench,
#                        udp-delay-relay, hop-probe, test-wire-simd, test-kernels
#                        (release build)
#   .devcarry/lib/       every shared library they load that is not glibc's
#                        (ldd), those over 1 MiB packed (NAME.xz), and OpenBLAS
#                        as libopenblas.so.0.xz (dlopen'ed by the CPU path only;
#                        36 MB unpacked, 8 MB packed)
#   .devcarry/gl/        the Vulkan loader and glvnd .debs (amd64; the device
#                        README's list) and the Khronos validation layer
#   .devcarry/rlx-rank   a wrapper that runs bin/rlx-rank with the carried
#                        libraries the machine lacks (the same for bench-gpu):
#                        only our programs see them, and a library the machine
#                        has (newer) is never shadowed by ours
#   .devcarry/net/       iproute2's ip and tc and their libraries (remote-cohort.sh)
#   .devcarry/torch_ref.py   ../shared/bench/torch_ref.py (../shared does not travel)
#   .devcarry/MANIFEST   commit, build, sizes
#
# Then the lead calls the device tool with
#   command: bash scripts/device/gpu-cohort.sh     carry: [".devcarry"]
#   kind: nvidia-h200-x2 (or nvidia-h200: the two-GPU runs are skipped)
#   timeout_s: 600
#
# Usage: scripts/device/prepare.sh [--no-debs]   (--no-debs: keep the .debs
# already in .devcarry/gl, for a machine without apt access)
# RLX_PREP_F16=1: the carry of scripts/device/gpu-f16.sh instead — rlx-rank
# and test-compute only, no network tools, no validation layer, and
# Fashion-MNIST in .devcarry/fashion-mnist (the training images as .xz,
# made once and kept in /tmp): build, data and tree fit the 64 MiB.
# Idempotent; exits non-zero with a message when a piece is missing.
set -euo pipefail

die () { echo "prepare.sh: $*" >&2; exit 1; }

root=$(git rev-parse --show-toplevel 2>/dev/null) || die "run it inside the rlx-cluster checkout"
cd "$root"
carry=.devcarry
build=build-release
fetch_debs=1
[ "${1:-}" = "--no-debs" ] && fetch_debs=0

# 1. ignored by git, so it travels only when carried
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF "/$carry/" "$exclude" 2>/dev/null || echo "/$carry/" >> "$exclude"

# 2. a release build of the two programs
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release >/dev/null || die "meson setup $build failed"
fi
ninja -C "$build" tools/rlx-rank tests/gpu/bench-gpu tests/gpu/test-resident \
  tests/gpu/test-round tests/gpu/test-compute tests/remote/remote-bench tests/remote/udp-delay-relay \
  tests/p2p/hop-probe tests/wire/test-wire-simd tests/kernels/test-kernels >/dev/null ||
  die "building in $build failed"

rm -rf "$carry/bin" "$carry/lib" "$carry/use"
mkdir -p "$carry/bin" "$carry/lib" "$carry/gl"
cp "$build/tools/rlx-rank" "$build/tests/gpu/bench-gpu" "$build/tests/gpu/test-resident" \
   "$build/tests/gpu/test-round" "$build/tests/gpu/test-compute" "$build/tests/remote/remote-bench" \
   "$build/tests/remote/udp-delay-relay" "$build/tests/p2p/hop-probe" \
   "$build/tests/wire/test-wire-simd" "$build/tests/kernels/test-kernels" "$carry/bin/"
strip "$carry/bin/"* 2>/dev/null || true

# 3. their libraries, less glibc's own (the device has a newer glibc; a
#    library built against Debian 12's 2.36 runs on it)
glibc='^(linux-vdso|ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libresolv|libutil)\.so'
copy_deps () {
  ldd "$1" | awk '/=> \// { print $1, $3 }' | while read -r name path; do
    if ! [[ $name =~ $glibc ]] && [ ! -e "$carry/lib/$name" ]; then
      cp -L "$path" "$carry/lib/$name"
    fi
  done
}
for f in "$carry/bin/"*; do copy_deps "$f"; done
# OpenBLAS is dlopen'ed (core/vision/rlx-blas.c), so ldd does not see it
# (awk reads to the end: an early exit would SIGPIPE ldconfig, which is fatal
# under pipefail once ldconfig's list outgrows a pipe, as python3-torch makes it)
blas=$(ldconfig -p | awk '/libopenblas\.so\.0 .*x86-64/ && !found { print $NF; found = 1 }')
[ -n "$blas" ] || die "libopenblas.so.0 not found (scripts/deps.sh installs libopenblas0-pthread)"
copy_deps "$blas"
xz -T0 -6 -c "$(readlink -f "$blas")" > "$carry/lib/libopenblas.so.0.xz"
# the large ones packed (the remote peers' libsoup pulls in ICU's 31 MB of
# data): gpu-cohort.sh unpacks what the machine lacks
for f in "$carry/lib/"*.so*; do
  case $f in *.xz) continue ;; esac
  if [ "$(stat -c %s "$f")" -gt $((1024 * 1024)) ]; then
    xz -T0 -6 -f "$f"
  fi
done

# 4. the Vulkan loader, glvnd and the validation layer, as amd64 .debs
debs="libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 vulkan-validationlayers"
if [ "$fetch_debs" = 1 ]; then
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  mkdir -p /tmp/amd64/partial
  # shellcheck disable=SC2086
  apt-get $o update >/dev/null || die "apt-get update failed (no network? use --no-debs)"
  rm -f "$carry/gl/"*.deb
  # shellcheck disable=SC2086
  (cd "$carry/gl" && apt-get $o download $debs >/dev/null) || die "apt-get download failed"
fi
for d in $debs; do
  # (RLX_PREP_F16 drops the validation layer below, also from an earlier run)
  [ "${RLX_PREP_F16:-0}" = 1 ] && [ "$d" = vulkan-validationlayers ] && continue
  ls "$carry/gl/${d}_"*.deb >/dev/null 2>&1 || die "$carry/gl has no $d .deb"
done

# 5. the wrappers: only our programs get our libraries
for p in rlx-rank bench-gpu test-resident test-round test-compute remote-bench udp-delay-relay hop-probe \
         test-wire-simd test-kernels; do
  cat > "$carry/$p" <<EOF
#!/bin/sh
# runs bin/$p with the carried libraries (written by scripts/device/prepare.sh)
# (use/: the carried libraries the machine lacks, made by gpu-cohort.sh;
# without it, all of lib/)
here=\$(cd "\$(dirname "\$0")" && pwd)
libs=\$here/lib
[ -d "\$here/use" ] && libs=\$here/use
LD_LIBRARY_PATH="\$libs" exec "\$here/bin/$p" "\$@"
EOF
  chmod +x "$carry/$p"
done

# 5b. iproute2's ip and tc, for the network-namespace benchmarks
#     (remote-cohort.sh): the device image has neither. Each runs through the
#     dynamic loader with its own library path, so the processes ip starts
#     (ip netns exec) do not inherit Debian's libraries.
rm -rf "$carry/net"
mkdir -p "$carry/net/lib"
for tool in ip tc; do
  bin=$(command -v $tool) || die "$tool (iproute2) not found: apt-get install iproute2"
  cp -L "$bin" "$carry/net/$tool.bin"
  ldd "$bin" | awk '/=> \// { print $1, $3 }' | while read -r name path; do
    [[ $name =~ $glibc ]] || cp -L "$path" "$carry/net/lib/$name"
  done
  cat > "$carry/net/$tool" <<EOF2
#!/bin/sh
d=\$(dirname "\$(readlink -f "\$0")")
exec /lib64/ld-linux-x86-64.so.2 --library-path "\$d/lib" "\$d/$tool.bin" "\$@"
EOF2
  chmod +x "$carry/net/$tool"
done
"$carry/net/ip" -V >/dev/null || die "$carry/net/ip does not run"
"$carry/net/tc" -V >/dev/null || die "$carry/net/tc does not run"

# 6. the PyTorch reference (../shared does not travel)
ref=${RLX_SHARED_DIR:-$root/../shared}/bench/torch_ref.py
[ -f "$ref" ] || ref=/work/shared/bench/torch_ref.py
[ -f "$ref" ] || die "torch_ref.py not found (set RLX_SHARED_DIR to the shared folder)"
cp "$ref" "$carry/torch_ref.py"

# 7. check: the programs resolve every library from the carry folder (the
#    packed ones unpacked for the check, as gpu-cohort.sh does)
check=$(mktemp -d)
for f in "$carry/lib/"*; do
  case $f in
    *.xz) xz -dc "$f" > "$check/$(basename "${f%.xz}")" ;;
    *)    cp "$f" "$check/" ;;
  esac
done
missing=$(LD_LIBRARY_PATH="$check" ldd "$carry/bin/"* | awk '/not found/' || true)
[ -z "$missing" ] || { rm -rf "$check"; die "unresolved libraries: $missing"; }
LD_LIBRARY_PATH="$check" "$carry/bin/rlx-rank" --help >/dev/null 2>&1 ||
  LD_LIBRARY_PATH="$check" "$carry/bin/rlx-rank" bench --help >/dev/null ||
  { rm -rf "$check"; die "$carry/rlx-rank does not run"; }
rm -rf "$check"

# 8. RLX_PREP_F16=1: trimmed to what gpu-f16.sh needs, with the data
if [ "${RLX_PREP_F16:-0}" = 1 ]; then
  (cd "$carry" && rm -rf net bin/bench-gpu bin/test-resident bin/test-round bin/remote-bench \
     bin/udp-delay-relay bin/hop-probe bin/test-wire-simd bin/test-kernels bench-gpu test-resident \
     test-round remote-bench udp-delay-relay hop-probe test-wire-simd test-kernels \
     gl/vulkan-validationlayers_*.deb)
  fm=${RLX_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
  [ -f "$fm/train-images-idx3-ubyte.gz" ] || die "no Fashion-MNIST in $fm (apt install dataset-fashion-mnist)"
  rm -rf "$carry/fashion-mnist"
  mkdir -p "$carry/fashion-mnist"
  xzc=/tmp/rlx-prep-train-images-idx3-ubyte.xz
  [ -s "$xzc" ] || zcat "$fm/train-images-idx3-ubyte.gz" | xz -9e -T0 > "$xzc"
  cp "$xzc" "$carry/fashion-mnist/train-images-idx3-ubyte.xz"
  zcat "$fm/t10k-images-idx3-ubyte.gz" | xz -9e -T0 > "$carry/fashion-mnist/t10k-images-idx3-ubyte.xz"
  cp "$fm/train-labels-idx1-ubyte.gz" "$fm/t10k-labels-idx1-ubyte.gz" "$carry/fashion-mnist/"
fi

{
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!.devcarry' || echo ' (with local changes)')"
  echo "built $(date -u +%FT%TZ) on $(. /etc/os-release; echo "$PRETTY_NAME"), $build (release)"
  echo "libraries: $(ls "$carry/lib" | tr '\n' ' ')"
  echo "debs: $(ls "$carry/gl" | tr '\n' ' ')"
} > "$carry/MANIFEST"

. scripts/device/send-size.sh
# (the f16 carry was sent at 63 MiB with the tree: its margin is smaller)
limit=62
[ "${RLX_PREP_F16:-0}" = 1 ] && limit=64
check_send_size prepare.sh "$limit" "$carry" || die "send less (or carry less)"
if [ "${RLX_PREP_F16:-0}" = 1 ]; then
  echo "prepare.sh: ready. Device call: command 'RLX_F16_VALIDATE=0 bash scripts/device/gpu-f16.sh', carry [\"$carry\"], kind nvidia-h200, timeout_s 600"
else
  echo "prepare.sh: ready. Device call: command 'bash scripts/device/gpu-cohort.sh', carry [\"$carry\"], kind nvidia-h200-x2, timeout_s 600"
fi
