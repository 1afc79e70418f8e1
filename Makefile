# Two entry points: `make demo` trains on the embedded Digits set, `make test` runs the suite.
# Both create the virtual environment on first use (see scripts/setup.sh): the demo installs flowpipe and its
# dependencies only; the test tools (the test extra) come with `make test`.
PY := .venv/bin/python

.PHONY: setup demo test bench

setup:
	bash scripts/setup.sh demo

demo: setup
	$(PY) -m flowpipe demo

test:
	bash scripts/setup.sh test
	$(PY) -m pytest -q

bench: setup
	$(PY) bench/overhead.py
