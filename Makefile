# Developer shortcuts. The README's two commands are the supported way in; these wrap them.
PYTHON ?= python

.PHONY: install test lint bench experiments ci clean

install:
	$(PYTHON) -m pip install -e ".[test]"

test:
	$(PYTHON) -m pytest

lint:
	$(PYTHON) -m ruff check simulator tests experiments
	$(PYTHON) -m ruff format --check simulator tests experiments
	lint-imports --config pyproject.toml

bench:
	$(PYTHON) -m experiments.bench

experiments:
	$(PYTHON) -m experiments

ci:
	bash .ci/run

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache experiments/out
