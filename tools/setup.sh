#!/usr/bin/env bash
# Installs everything umqtt3's tests, tools and demo need on a Debian machine:
# mosquitto and its clients (interop peers), a Java runtime (Spark), the
# CPython dev requirements, the spark extra (PySpark, pandas<3, pyarrow,
# matplotlib) and the WebAssembly MicroPython from npm.
# Used by `make setup` and by .ci/run. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
PYTHON=${PYTHON:-$(command -v python || command -v python3)}

pkgs=""
dpkg -s mosquitto >/dev/null 2>&1 || pkgs="$pkgs mosquitto"
dpkg -s mosquitto-clients >/dev/null 2>&1 || pkgs="$pkgs mosquitto-clients"
command -v java >/dev/null 2>&1 || pkgs="$pkgs default-jre-headless"
command -v make >/dev/null 2>&1 || pkgs="$pkgs make"
command -v node >/dev/null 2>&1 || pkgs="$pkgs nodejs npm"
command -v openssl >/dev/null 2>&1 || pkgs="$pkgs openssl"
if [ -n "$pkgs" ]; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    echo "== apt-get install$pkgs"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends $pkgs </dev/null
fi

# Installing mosquitto may start the system broker on port 1883; tests and the
# demo start their own brokers on free ports.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl stop mosquitto >/dev/null 2>&1 || true
fi
service mosquitto stop >/dev/null 2>&1 || true

echo "== pip install -r requirements-dev.txt"
"$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
    -r requirements-dev.txt

# The spark extra's packages (pyproject.toml) for the pipeline in
# pipeline/umqtt3_pipeline, without installing umqtt3 itself: the tests and tools
# import it from lib/ and tools/ of this tree.
echo "== pip install the spark extra (PySpark pipeline)"
spark_reqs=$("$PYTHON" -c '
import re
text = open("pyproject.toml").read()
m = re.search(r"^spark\s*=\s*\[(.*?)\]", text, re.M | re.S)
print(" ".join(re.findall(r"\"([^\"]+)\"", m.group(1))))')
# shellcheck disable=SC2086  # one word per requirement
"$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore $spark_reqs

# MicroPython's stubs for the type check (tests/test_typecheck.py), one
# directory per board family: both packages define machine, network, time...
echo "== MicroPython stubs (build/stubs/<family>)"
sed -n 's/^#stubs //p' requirements-dev.txt | while read -r family reqs; do
    dir="build/stubs/$family"
    [ "$(cat "$dir/.requirements" 2>/dev/null)" = "$reqs" ] && continue
    rm -rf "$dir"
    # shellcheck disable=SC2086  # one word per requirement
    "$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
        --target "$dir" $reqs
    echo "$reqs" > "$dir/.requirements"
done

echo "== npm ci (WebAssembly MicroPython)"
npm ci --no-audit --no-fund --loglevel=error || npm install --no-audit --no-fund --loglevel=error
mkdir -p build && touch build/.setup
