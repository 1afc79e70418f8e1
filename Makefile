# Two entry points: `make demo` trains on the embedded Digits set, `make test` runs the suite.
# Both create the virtual environment on first use (see scripts/setup.sh): the demo installs flowpipe and its
# dependencies only; the test tools (the test extra) come with `make test`.
PY := .venv/bin/python

.PHONY: setup demo test bench docs

setup:
	bash scripts/setup.sh demo

demo: setup
	$(PY) -m flowpipe demo

test:
	bash scripts/setup.sh test
	$(PY) -m pytest -q

# The API reference from the docstrings (Sphinx, in the test extra): docs/api/_build/index.html
docs:
	bash scripts/setup.sh test
	$(PY) -m sphinx -W -q -b html docs/api docs/api/_build

bench: setup
	$(PY) bench/overhead.py
