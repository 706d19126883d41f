# Each target builds its own virtual environment on a fresh machine.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench venv clean lock

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,embedded]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/shadowsim demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# The production image's pinned, hashed dependencies (runtime only: no test tools, no embedded broker).
lock:
	rm -rf .lock-venv && $(PY) -m venv .lock-venv && .lock-venv/bin/pip install -q pip-tools
	.lock-venv/bin/pip-compile -q --generate-hashes --strip-extras --no-emit-index-url --no-emit-find-links --allow-unsafe \
		--output-file requirements.lock pyproject.toml
	rm -rf .lock-venv
