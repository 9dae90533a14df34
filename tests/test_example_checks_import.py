"""The live checks under examples/checks run only where Go is built (``make test-clients``);
they import the suite and the package, so a rename that breaks them fails here first."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

CHECKS = sorted((Path(__file__).parent.parent / "examples" / "checks").glob("test_*.py"))


@pytest.mark.parametrize("path", CHECKS, ids=[p.stem for p in CHECKS])
def test_example_check_imports(path: Path) -> None:
    spec = importlib.util.spec_from_file_location(f"example_checks_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert any(name.startswith("test_") for name in vars(module))


def test_there_are_example_checks() -> None:
    assert CHECKS, "examples/checks holds no test modules"
