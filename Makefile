# Two entry points: `make demo` trains on the embedded Digits set, `make test` runs the suite.
# Both create the virtual environment on first use (see scripts/setup.sh).
PY := .venv/bin/python

.PHONY: setup demo test bench

setup:
	bash scripts/setup.sh

demo: setup
	$(PY) -m flowpipe demo

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) bench/overhead.py
