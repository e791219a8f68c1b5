#!/usr/bin/env bash
# Installs the Debian packages the `libfabric` and `verbs` features of
# spindle-transport-rdma need to build and test, when they are missing:
#   libfabric  -> libfabric-dev (1.17+; headers + libfabric.so + tcp/shm/rxm providers),
#                 libclang-dev + clang (bindgen), pkg-config
#   verbs      -> cmake, libibverbs-dev, libnl-3-dev, libnl-route-3-dev (the `ibverbs`
#                 crate builds its vendored rdma-core with them), clang/libclang (bindgen)
# Idempotent: does nothing when everything is installed. Needs root or sudo to install.
set -euo pipefail

packages=(libfabric-dev libclang-dev clang cmake pkg-config libibverbs-dev libnl-3-dev libnl-route-3-dev)

missing=()
for pkg in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "setup-rdma: all packages present"
    exit 0
fi

echo "setup-rdma: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
else
    echo "setup-rdma: need root or sudo to install: ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"

# libfabric 1.17 or newer is required (the bindings are generated from its headers).
version=$(pkg-config --modversion libfabric 2>/dev/null || echo 0)
major=${version%%.*}
minor=${version#*.}; minor=${minor%%.*}
if [ "$major" -lt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -lt 17 ]; }; then
    echo "setup-rdma: libfabric $version found, 1.17 or newer needed" >&2
    exit 1
fi
echo "setup-rdma: done (libfabric $version)"
