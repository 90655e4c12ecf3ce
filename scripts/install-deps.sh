#!/usr/bin/env bash
# Installs the Debian packages that building, testing and the demo need, when any
# is missing. Idempotent and quiet when everything is present.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
      libcmocka-dev libjansson-dev libyaml-dev libssl-dev libcurl4-openssl-dev
      libmicrohttpd-dev libcairo2-dev zlib1g-dev libopenblas-dev openmpi-bin libopenmpi-dev
      dataset-fashion-mnist iproute2 procps python3 bc gnuplot-nox jq)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing missing packages: ${missing[*]}"
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
  { $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}"; }
