#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build and test rewind (as root, apt-get only).
# Idempotent and quiet when everything is there. nvcc (the CUDA Toolkit) is optional: when it is
# on the machine the CUDA code is compiled too. Arguments name further packages (scripts/fuzz.sh: clang).
set -euo pipefail
packages=(g++ cmake ninja-build libboost-dev libeigen3-dev doctest-dev libcli11-dev libfmt-dev
          zlib1g-dev gnuplot-nox dataset-fashion-mnist libopenmpi-dev openmpi-bin "$@")  # and any named here
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "setup: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: run as root (or install these packages yourself): ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
