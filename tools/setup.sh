#!/usr/bin/env bash
# The set-up behind `make setup` (and behind `make demo` and `make test` on a
# fresh clone), for Debian and Ubuntu. Safe to run again. In order:
#  0. The interpreter's version: 3.11 or newer (PySpark 4), else refused.
#  1. apt (as root, else through sudo; only what is missing): mosquitto and its
#     clients (interop peers), a Java runtime (Spark), Node.js and npm (the
#     WebAssembly MicroPython), make (./run's, when it is missing), git,
#     openssl, python3-venv (Debian leaves venv out of python3).
#  2. A virtual environment, .venv/ (VENV=...), made with python3 (PYTHON3=...):
#     Debian's python3 refuses `pip install` outside one (PEP 668). Into it go
#     requirements-dev.txt, the spark extra (PySpark, pandas<3, pyarrow,
#     matplotlib) and umqtt3 itself, editable (lib/ and pipeline/ of this
#     checkout), with its console scripts.
#     PYTHON=/path/to/python installs the requirements into that interpreter
#     instead, and leaves umqtt3 itself out (the Makefile then puts lib/ and
#     pipeline/ on PYTHONPATH).
#  3. MicroPython's stubs for the type check, into build/stubs/<family>.
#  4. npm ci: the WebAssembly MicroPython, pinned in package-lock.json.
# STAMP=file is touched at the end (the Makefile's record that this ran).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
VENV=${VENV:-.venv}
PYTHON3=${PYTHON3:-python3}
PYTHON=${PYTHON:-}
STAMP=${STAMP:-build/.setup}
PIP_FLAGS="-q --disable-pip-version-check --root-user-action=ignore"

say() { echo "setup: $*"; }
die() { echo "setup: $*" >&2; exit 1; }

# ---------------------------------------------------------------- 0. Python 3.11+
# The spark extra (PySpark 4: the pipeline, the demo) needs Python 3.11 or
# newer: refused here, before apt and pip, in one line rather than in pip's
# resolver. (The library alone runs on 3.9+; `pip install .` needs no set-up.)
if [ -n "$PYTHON" ]; then py=$PYTHON
elif [ -x "$VENV/bin/python" ]; then py=$VENV/bin/python
else py=$PYTHON3
fi
if command -v "$py" >/dev/null 2>&1; then
    ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) ||
        die "$py does not run"
    case $ver in
        [0-2].* | 3.[0-9] | 3.10)
            if [ -n "$PYTHON" ]; then how="PYTHON=python3.11 make setup"
            elif [ "$py" = "$VENV/bin/python" ]; then how="rm -rf $VENV; PYTHON3=python3.11 ./run demo"
            else how="PYTHON3=python3.11 ./run demo"
            fi
            die "$py is Python $ver; PySpark 4 (the pipeline, the demo) needs 3.11+ (Debian 12's or Ubuntu 24.04's python3): on Ubuntu 22.04, apt-get install python3.11 python3.11-venv, then $how" ;;
    esac
fi

# ---------------------------------------------------------------- 1. apt
pkgs=""
dpkg -s mosquitto >/dev/null 2>&1 || pkgs="$pkgs mosquitto"
dpkg -s mosquitto-clients >/dev/null 2>&1 || pkgs="$pkgs mosquitto-clients"
command -v java >/dev/null 2>&1 || pkgs="$pkgs default-jre-headless"
command -v make >/dev/null 2>&1 || pkgs="$pkgs make"
command -v node >/dev/null 2>&1 || pkgs="$pkgs nodejs"
command -v npm >/dev/null 2>&1 || pkgs="$pkgs npm"
command -v openssl >/dev/null 2>&1 || pkgs="$pkgs openssl"
command -v git >/dev/null 2>&1 || pkgs="$pkgs git"
if [ -z "$PYTHON" ]; then
    command -v "$PYTHON3" >/dev/null 2>&1 || die "no $PYTHON3 on PATH: install python3 (apt-get install python3)"
    # Debian's python3 has venv but not ensurepip, which python3-venv adds
    # (python3.11-venv for a PYTHON3=python3.11 beside an older python3:
    # python3-venv would bring the older one's)
    if ! "$PYTHON3" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        if [ "$PYTHON3" = python3 ]; then pkgs="$pkgs python3-venv"
        else pkgs="$pkgs python$("$PYTHON3" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv"
        fi
    fi
fi
if [ -n "$pkgs" ]; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null 2>&1 ||
            die "missing Debian packages:$pkgs; as root run: apt-get install$pkgs"
        SUDO="sudo"
    fi
    say "installing Debian packages:$pkgs (${SUDO:+sudo }apt-get install)"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends $pkgs </dev/null
fi

# Installing mosquitto may start the system broker on port 1883; tests and the
# demo start their own brokers on free ports.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl stop mosquitto >/dev/null 2>&1 || true
fi
service mosquitto stop >/dev/null 2>&1 || true

# ---------------------------------------------------------------- 2. Python
install_self=1
if [ -n "$PYTHON" ]; then
    install_self=""
    say "PYTHON=$PYTHON given: installing the requirements into it (umqtt3 itself stays in lib/)"
else
    if [ ! -x "$VENV/bin/python" ]; then
        say "making a virtual environment in $VENV with $(command -v "$PYTHON3") ($("$PYTHON3" -V 2>&1))"
        "$PYTHON3" -m venv "$VENV"
    fi
    PYTHON="$VENV/bin/python"
fi
say "pip install -r requirements-dev.txt (test and device tools) into $PYTHON"
"$PYTHON" -m pip install $PIP_FLAGS -r requirements-dev.txt

# The spark extra's requirements, read from pyproject.toml (one list).
spark_reqs=$("$PYTHON" -c '
import re
text = open("pyproject.toml").read()
m = re.search(r"^spark\s*=\s*\[(.*?)\]", text, re.M | re.S)
print(" ".join(re.findall(r"\"([^\"]+)\"", m.group(1))))')
if [ -n "$install_self" ]; then
    say "pip install -e '.[spark]' (umqtt3, the pipeline, PySpark: a large first download)"
    "$PYTHON" -m pip install $PIP_FLAGS -e '.[spark]'
else
    say "pip install the spark extra: $spark_reqs"
    # shellcheck disable=SC2086  # one word per requirement
    "$PYTHON" -m pip install $PIP_FLAGS $spark_reqs
fi

# ---------------------------------------------------------------- 3. stubs
# MicroPython's stubs for the type check (tests/test_typecheck.py), one
# directory per board family: both packages define machine, network, time...
sed -n 's/^#stubs //p' requirements-dev.txt | while read -r family reqs; do
    dir="build/stubs/$family"
    [ "$(cat "$dir/.requirements" 2>/dev/null)" = "$reqs" ] && continue
    say "MicroPython stubs for $family into $dir"
    rm -rf "$dir"
    # shellcheck disable=SC2086  # one word per requirement
    "$PYTHON" -m pip install $PIP_FLAGS --target "$dir" $reqs
    echo "$reqs" > "$dir/.requirements"
done

# ---------------------------------------------------------------- 4. npm
say "npm ci (the WebAssembly MicroPython, into node_modules/)"
npm ci --no-audit --no-fund --loglevel=error || npm install --no-audit --no-fund --loglevel=error

mkdir -p "$(dirname "$STAMP")" && touch "$STAMP"
say "done; the commands use $PYTHON"
