"""scripts/bootstrap compiles the environment's bytecode: where PYTHONDONTWRITEBYTECODE is
set nothing else would, and every process importing torch and transformers would compile
them from source again."""

import importlib.util
from pathlib import Path

import pytest


@pytest.mark.parametrize("module", ["torch", "transformers", "httpx"])
def test_the_heavy_imports_have_cached_bytecode(module: str) -> None:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    assert Path(importlib.util.cache_from_source(spec.origin)).is_file(), spec.origin
