#!/usr/bin/env bash
# Builds the Python virtualenv with Cyclone DDS's Python binding (PyPI `cyclonedds`, which
# ships its own C library) that topics/tests/crosscheck.rs compares our CDR against.
#
#   topics/tests/crosscheck/setup.sh          # idempotent; prints the venv's python path
#
# The venv lives in topics/tests/crosscheck/.venv unless SPINDLE_CROSSCHECK_VENV says
# otherwise (the Rust test reads the same variable). Needs the network (PyPI) once.
set -euo pipefail

CYCLONEDDS_VERSION="11.0.1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${SPINDLE_CROSSCHECK_VENV:-$here/.venv}"

# One builder at a time (tests run in parallel, and scripts/test.sh may run us too).
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9

check() {
    "$venv/bin/python" -c 'from cyclonedds.idl import IdlStruct, IdlUnion, IdlEnum; import cyclonedds.idl.types' \
        >/dev/null 2>&1
}

if [ -x "$venv/bin/python" ] && check; then
    echo "$venv/bin/python"
    exit 0
fi

# Debian/Ubuntu split venv/ensurepip into python3-venv.
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo "setup.sh: python3-venv missing, installing it" >&2
    sudo_cmd=""
    if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $sudo_cmd apt-get update -qq >&2
    pyver="$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
    $sudo_cmd apt-get install -y -qq --no-install-recommends python3-venv >&2 || $sudo_cmd apt-get install -y -qq --no-install-recommends "python${pyver}-venv" >&2
fi

rm -rf "$venv"
python3 -m venv "$venv" >&2
"$venv/bin/pip" install --quiet --disable-pip-version-check "cyclonedds==${CYCLONEDDS_VERSION}" >&2
check || { echo "setup.sh: cyclonedds installed but does not import" >&2; exit 1; }
echo "$venv/bin/python"
