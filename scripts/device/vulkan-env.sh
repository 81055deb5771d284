# scripts/device/vulkan-env.sh — sourced THERE (the device machine) by the
# device scripts, with C (the carried .devcarry), OUT and RANK set and a
# `say` function: installs the Vulkan loader where the machine has none,
# picks the carried libraries the machine lacks (carry-libs.sh), lists the
# devices into $OUT/devices.txt (pointing the loader at NVIDIA's ICD when
# it finds none), and sets GPUS (the NVIDIA devices' numbers in
# `rlx-rank devices`, at most two), NGPU and TWO ("vulkan:I vulkan:J", or
# RLX_DC_TWO when set).
# the Vulkan loader (the README's recipe), only where the machine has none
# (RLX_DC_DRY=1: a dry run on a machine of our own, which installs nothing)
if [ -n "${RLX_DC_DRY-}" ]; then
  say "dry run: nothing installed"
elif ! ldconfig -p | grep 'libvulkan\.so\.1' >/dev/null; then  # not -q: see carry-libs.sh
  for f in "$C"/gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
else
  # the validation layer alone
  for f in "$C"/gl/vulkan-validationlayers_*.deb; do dpkg -x "$f" /; done
fi
# our libraries, only those the machine lacks (a newer one of its own wins)
. "$(dirname "$0")/carry-libs.sh"
say "carried libraries in use: $(ls "$C/use" | tr '\n' ' ')"

{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; } \
  > "$OUT/devices.txt" 2>&1
timeout 60 "$RANK" devices >> "$OUT/devices.txt" 2>&1
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if command -v nvidia-smi >/dev/null && ! grep -q '^\s*\[[0-9]*\] NVIDIA' "$OUT/devices.txt" &&
   [ -f "$icd" ]; then
  say "no NVIDIA Vulkan device listed; pointing the loader at the driver's ICD ($icd)"
  export VK_DRIVER_FILES=$icd
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  timeout 60 "$RANK" devices >> "$OUT/devices.txt" 2>&1
fi
cat "$OUT/devices.txt"
# the NVIDIA devices by the numbers rlx-rank devices gives them
GPUS=$(sed -n 's/^\s*\[\([0-9]*\)\] NVIDIA.*/\1/p' "$OUT/devices.txt" | sort -un | head -2)
NGPU=$(echo "$GPUS" | grep -c . || true)
TWO=${RLX_DC_TWO-}
if [ -z "${RLX_DC_TWO+x}" ] && [ "$NGPU" -ge 2 ]; then
  TWO=$(for i in $GPUS; do printf 'vulkan:%s ' "$i"; done)
fi
