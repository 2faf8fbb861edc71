#!/bin/sh
# Make sure the Debian packages a make target needs are installed: install them when running
# as root, otherwise say exactly what to run. Usage: scripts/deps.sh build|test|test-gpu|bench|wheel
set -eu

case "${1:-build}" in
build) pkgs="cmake make gcc libc6-dev pkg-config libjansson-dev zlib1g-dev libsqlite3-dev libdlpack-dev" ;;
test) pkgs="cmake make gcc libc6-dev pkg-config libjansson-dev zlib1g-dev libsqlite3-dev libdlpack-dev python3-numpy clang libclang-rt-14-dev chromium fonts-dejavu-core python3 curl python3-torch python3-setuptools python3-wheel python3-pip python3-venv" ;;
test-gpu) pkgs="cmake make gcc libc6-dev pkg-config libjansson-dev zlib1g-dev libsqlite3-dev libdlpack-dev python3" ;; # python3 reads the GPU traces
wheel) pkgs="cmake make gcc libc6-dev pkg-config libjansson-dev zlib1g-dev libsqlite3-dev libdlpack-dev python3 python3-setuptools python3-wheel python3-pip" ;;
bench) pkgs="cmake make gcc libc6-dev pkg-config libjansson-dev zlib1g-dev libsqlite3-dev libdlpack-dev libopenblas0-pthread" ;;
*) echo "deps.sh: unknown set '$1' (build, test, test-gpu, bench or wheel)" >&2; exit 2 ;;
esac

missing=""
for p in $pkgs; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" = 0 ]; then
    echo "linfuse: installing missing Debian packages:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing
else
    echo "linfuse: missing Debian packages:$missing" >&2
    echo "linfuse: install them with:  sudo apt-get install$missing" >&2
    exit 1
fi
