# Each target builds its own virtual environment on a fresh machine.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench venv clean lock system-deps oracle native

# Tools some tests run for real, as command:Debian-package. `make test` installs the missing ones when it runs as
# root on a machine with apt; otherwise those tests are skipped with the reason (CI, where CI=true, fails them).
SYSTEM_TOOLS := promtool:prometheus prometheus:prometheus amtool:prometheus-alertmanager chromium:chromium

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,embedded]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/shadowsim demo

system-deps:
	@missing=""; for t in $(SYSTEM_TOOLS); do command -v $${t%%:*} >/dev/null 2>&1 || missing="$$missing $${t##*:}"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "make: installing Debian packages:$$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  (apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null) \
	    || echo "make: apt-get failed; the tests that need$$missing are skipped"; \
	  (systemctl stop prometheus prometheus-alertmanager 2>/dev/null || true); \
	else echo "make: not root or no apt: not installing$$missing; the tests that need them are skipped"; fi

test: $(STAMP) system-deps native
	$(BIN)/python -m pytest -q -p no:cacheprovider tests

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# SGLang 0.5.23's real scheduler beside ours, step by step (docs/fidelity.md); builds its own ~6 GB environment
# once, cached outside the checkout (~/.cache/shadowsim/oracle-<lock hash>).
oracle: $(STAMP)
	nice $(BIN)/python -m oracle

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# The production image's pinned, hashed dependencies (runtime only: no test tools, no embedded broker).
lock:
	rm -rf .lock-venv && $(PY) -m venv .lock-venv && .lock-venv/bin/pip install -q pip-tools
	.lock-venv/bin/pip-compile -q --generate-hashes --strip-extras --no-emit-index-url --no-emit-find-links --allow-unsafe \
		--output-file requirements.lock pyproject.toml
	rm -rf .lock-venv

# The compiled modules (setup.py's NATIVE_MODULES; Cython): rebuilt in place when a source changed. A compiled
# module older than its .py is not used (simcore/_native.py warns); SHADOWSIM_PURE_PYTHON=1 imports the sources.
native: $(STAMP)
	$(BIN)/python setup.py -q build_ext --inplace
