#!/usr/bin/env bash
# Installs every Debian package that building, running and testing rlx-cluster
# needs. Idempotent: when everything is present it does nothing and says so.
set -euo pipefail

PACKAGES=(
  # build
  build-essential meson ninja-build pkg-config clang libclang-rt-14-dev
  # core libraries
  libglib2.0-dev libjson-glib-dev libopenblas-dev libopenblas0-pthread zlib1g-dev
  # networking
  libnice-dev libsoup-3.0-dev libgnutls28-dev glib-networking
  # remote peers: QUIC (ngtcp2 0.12 + GnuTLS helper); TURN server, NAT and
  # namespaces for the multi-host tests
  libngtcp2-dev libngtcp2-crypto-gnutls-dev coturn nftables
  # GPU
  libvulkan-dev libvulkan1 mesa-vulkan-drivers glslc spirv-tools vulkan-validationlayers vulkan-tools
  # app
  libgtk-4-dev libadwaita-1-dev gettext desktop-file-utils appstream libglib2.0-bin
  xvfb xauth dbus dbus-x11 at-spi2-core python3-gi python3-pyatspi gir1.2-atspi-2.0
  gir1.2-gtk-4.0 x11-apps x11-utils imagemagick
  # data and tests
  dataset-fashion-mnist nodejs iproute2 python3-numpy
  # tests: the reference xxHash that the parameter hash is checked against
  libxxhash-dev
  # the Debian packages (./rlx package and the package test)
  debhelper dpkg-dev lintian
)
# The PyTorch reference for benchmarks is large; only `--bench` pulls it in.
if [[ "${1:-}" == "--bench" ]]; then
  PACKAGES+=(python3-torch libopenblas0-pthread hyperfine)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# node may come from elsewhere (a newer Node.js already on PATH is fine)
if command -v node >/dev/null 2>&1; then
  missing=("${missing[@]/nodejs}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))

if ((${#missing[@]} == 0)); then
  echo "deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: done"
