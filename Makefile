# drivelab: one machine, root, Debian 12 / Ubuntu.
#   make demo   build the local lab and show it (later: run the two-client scenario)
#   make test   lint everything and run every test, lab tests included
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
BIN := $(VENV)/bin
PY := /usr/bin/python3

# What the demo needs from Debian: the namespace lab, the server under test, the host
# side's tools, telemetry, the venv.
DEMO_PACKAGES := postgresql postgresql-client postgresql-contrib fio openssh-server openssh-client \
	xfsprogs btrfs-progs e2fsprogs util-linux iproute2 procps psmisc \
	prometheus prometheus-node-exporter smartmontools hdparm sdparm nvme-cli mdadm \
	python3-psycopg2 python3-venv python3-pip sqlite3
# What the tests need beyond it: Chromium (the HTML report rendered headless), the
# container and VM labs (systemd-nspawn, debootstrap, the lab's apt proxy, qemu) and
# libfaketime (clocks off the controller's), sfdisk (a partition table the gate must refuse,
# the VM's root disk).
TEST_PACKAGES := chromium systemd-container debootstrap apt-cacher-ng faketime \
	qemu-system-x86 qemu-utils fdisk
APT_PACKAGES := $(DEMO_PACKAGES) $(TEST_PACKAGES)

.PHONY: help setup setup-demo apt apt-demo venv venv-run constraints demo test long-test lint unit lab-test bench down clean

help:
	@echo "make demo    build the local lab, run the two-client scenario (lab size), print the report"
	@echo "make test    lint + unit + lab tests (installs what it needs)"
	@echo "make long-test  the lab tests marked long (the VM lab's write cache cells, reset and recovery: 40 min)"
	@echo "make bench   every script in bench/, each writing its section of docs/benchmarks.md (hours)"
	@echo "make down    tear the local lab down"

# Everything the tests need (make test); setup-demo: only what the demo needs (make demo)
setup: apt venv
setup-demo: apt-demo venv-run

# Installs only what is missing; services are kept from starting in the host's own
# namespace (the lab starts its own, inside its namespaces).
apt: PACKAGES := $(APT_PACKAGES)
apt-demo: PACKAGES := $(DEMO_PACKAGES)
apt apt-demo:
	@missing=$$(for p in $(PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "drivelab: installing Debian packages:" $$missing; \
	  made_policy=0; \
	  if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; made_policy=1; fi; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing; rc=$$?; \
	  [ $$made_policy = 1 ] && rm -f /usr/sbin/policy-rc.d; \
	  exit $$rc; \
	fi

# venv: drivelab and the tools of the tests and lint; venv-run: drivelab alone
venv: $(VENV)/.installed
venv-run: $(VENV)/.installed-run

# pip itself pinned; every package pip pulls in held to constraints.txt
PIP_VERSION := 26.3

$(VENV)/.installed: pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q pip==$(PIP_VERSION)
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	@touch $@ $(VENV)/.installed-run

$(VENV)/.installed-run: pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q pip==$(PIP_VERSION)
	$(BIN)/pip install -q -c constraints.txt -e .
	@touch $@

# constraints.txt from the venv as it is (after a pin in pyproject.toml changed)
constraints: venv
	@{ sed -n '1,3p' constraints.txt; $(BIN)/pip freeze --exclude-editable; } > constraints.txt.new
	@mv constraints.txt.new constraints.txt

# The lab, then the seeds' two-client cache-defeating test in its lab size over the four
# emulated drive classes (its preflight checks every host answers over SSH first),
# ending with the report.
demo: setup-demo
	$(BIN)/drivelab lab up
	$(BIN)/drivelab run scenarios/seed-two-clients.yml --size lab

down: venv-run
	$(BIN)/drivelab lab down

lint: venv
	$(BIN)/ruff check collector tests bench roles
	$(BIN)/ruff format --check collector tests bench roles
	$(BIN)/yamllint -s .
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint --offline
	@for p in playbooks/*.yml; do $(BIN)/ansible-playbook --syntax-check -i localhost, $$p >/dev/null || exit 1; done; echo "syntax-check: playbooks OK"

unit: venv
	$(BIN)/pytest -n 2 -m "not lab" tests

lab-test: setup
	$(BIN)/pytest -m lab tests

# Two workers: every lab test on one of them, in file order (one lab per machine; the
# scheduler in tests/conftest.py), the unit tests on the other meanwhile.
# The tests marked long (a quarter hour or more each on the VM lab) run by `make long-test`.
test: setup lint
	$(BIN)/pytest -n 2 --durations=25 -m "not long" tests

long-test: setup
	$(BIN)/pytest --durations=10 -m long tests

bench: setup
	$(BIN)/python bench/lab_timing.py
	$(BIN)/python bench/skew.py
	$(BIN)/python bench/parse_throughput.py
	$(BIN)/python bench/ratesearch_model.py
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/ansible_tuning.py
	$(BIN)/python bench/client_scale.py
	$(BIN)/python bench/fidelity.py
	$(BIN)/python bench/demo_timing.py
	$(BIN)/python bench/ci_timing.py
	$(BIN)/python bench/lab_kinds.py
	$(BIN)/python bench/controller_trixie.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
