"""Every benchmark module imports: a move that leaves a stale relative import behind (as
``from .stats`` in preset.py once did) fails here, not in the one run that needs it."""

import importlib
import pkgutil

import pytest

import inference.bench

MODULES = sorted(m.name for m in pkgutil.iter_modules(inference.bench.__path__))


def test_the_bench_package_has_its_modules():
    assert {"engine", "planner", "preset", "serving", "step_curves"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_bench_module_imports(name):
    importlib.import_module(f"inference.bench.{name}")
