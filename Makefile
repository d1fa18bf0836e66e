# inferd: `make serve` and `make test` work on a fresh clone (each installs what it needs first).
# `make serve` needs Python and a C++ compiler only (no browser, no Node); `make test` adds the test
# extras and Debian's Chromium for the browser tests.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# Two stamps: the serving install (venv, llama-cpp-python, inferd and its dependencies), then the
# whole install (plus the test extras); `.installed` is the whole one.
SERVE_STAMP := $(VENV)/.installed-serve
STAMP := $(VENV)/.installed
# llama-cpp-python ships no binary wheel; it is built once per machine (6 to 12 minutes on
# two cores) into this wheelhouse, outside the repository, and reused by every later install.
# Built for this CPU (-march=native) but without AMX: ggml's AMX matmul crashed (SIGSEGV in
# libggml-cpu) on every prompt longer than a few tokens on this project's Sapphire Rapids machines;
# without it a 241-token prompt and 64 tokens take 3.7 s, against 5.1 s for a plain AVX2 build.
# The folder's name says the flags, so a wheel built with other flags is never picked up.
WHEELHOUSE ?= $(HOME)/.cache/inferd/wheels-native-noamx
LLAMA_CPP_VERSION := 0.3.36
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
LLAMA_CMAKE_ARGS := $(if $(filter x86_64,$(shell uname -m)),-DGGML_NATIVE=ON "-DCMAKE_C_FLAGS=$(NO_AMX)" "-DCMAKE_CXX_FLAGS=$(NO_AMX)")
PG_URL ?= postgresql://127.0.0.1:5432/test
REDIS_URL ?= redis://127.0.0.1:6379/0

# The web console's libraries (Alpine.js's CSP build, Chart.js) are committed, built, in
# src/inferd/console/static/vendor/ with a manifest of their versions and sha256s, which
# tests/console/test_vendor.py holds to console/package-lock.json: serving needs no npm.
# `make console` rebuilds them with npm from the lock file (after an upgrade there);
# `make console-check` rebuilds them in a temporary folder and compares them with the committed
# ones. The browser tests drive Debian's Chromium (never a Playwright download).
VENDOR := src/inferd/console/static/vendor

.PHONY: install install-serve serve test test-sqlite test-postgres bench chromium haproxy console console-check

install: $(STAMP) chromium haproxy

install-serve: $(SERVE_STAMP)

$(SERVE_STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	ls $(WHEELHOUSE)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1 || \
	  CMAKE_ARGS='$(LLAMA_CMAKE_ARGS)' CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(PIP) wheel --no-cache-dir --no-deps -w $(WHEELHOUSE) llama-cpp-python==$(LLAMA_CPP_VERSION)
	$(PIP) install -q -c constraints.txt --find-links $(WHEELHOUSE) -e .
	touch $(SERVE_STAMP)

$(STAMP): $(SERVE_STAMP)
	$(PIP) install -q -c constraints.txt --find-links $(WHEELHOUSE) -e '.[test]'
	touch $(STAMP)

chromium:
	@command -v chromium >/dev/null || { apt-get update && apt-get install -y chromium; } || \
	  { echo "make install: Chromium is needed by the browser tests (apt-get install chromium)" >&2; exit 1; }

# The load-balancer test (tests/test_load_balancer.py) puts Debian's HAProxy in front of replicas.
haproxy:
	@command -v haproxy >/dev/null || { apt-get update && apt-get install -y haproxy; } || \
	  { echo "make install: HAProxy is needed by the load-balancer test (apt-get install haproxy)" >&2; exit 1; }

serve: $(SERVE_STAMP)
	$(VENV)/bin/inferd serve

# The whole suite twice, both at once: embedded SQLite with in-process limits, and PostgreSQL +
# Redis. Each suite runs in XDIST_WORKERS pytest-xdist workers, a test file never split between
# two (its module's servers start once; the session's start once per worker): much of a test's
# time is waiting on servers, sleeps and subprocesses, which another worker's tests fill. Nothing
# is shared: each worker of each run has its own databases, data dirs, Redis key prefix and ports.
# -O prints each suite's report whole, when it ends, with its 25 slowest tests (the suite must stay
# well inside CI's time); make fails if either fails. Workers are off by default (XDIST_WORKERS=0,
# one process a suite): with 2, PostgreSQL's default 100 connections ran out (TooManyConnectionsError).
XDIST_WORKERS ?= 0
PYTEST := $(PY) -m pytest -n $(XDIST_WORKERS) --dist loadfile --durations=25

test: install
	$(MAKE) -j2 -O test-sqlite test-postgres

test-sqlite: install
	env -u INFERD_DATABASE_URL -u INFERD_REDIS_URL $(PYTEST)

test-postgres: install
	INFERD_DATABASE_URL=$(PG_URL) INFERD_REDIS_URL=$(REDIS_URL) $(PYTEST)

bench: install
	$(PY) bench/overhead.py

define NEED_NPM
@command -v npm >/dev/null || { apt-get update && apt-get install -y nodejs npm; } || \
  { echo "make $@: npm is needed to rebuild the console's libraries (apt-get install nodejs npm)" >&2; exit 1; }
endef

console:
	$(NEED_NPM)
	cd console && npm ci --no-audit --no-fund && node build.mjs

console-check:
	$(NEED_NPM)
	cd console && npm ci --no-audit --no-fund
	@out=$$(mktemp -d); node console/build.mjs --out $$out >/dev/null && diff -r $$out $(VENDOR); status=$$?; \
	  rm -rf "$$out"; [ $$status != 0 ] || echo "make console-check: $(VENDOR) is what console/package-lock.json builds"; \
	  exit $$status
