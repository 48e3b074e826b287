"""Helpers shared by the tests that need a really installed wheel."""

from __future__ import annotations

import os
import site
import sysconfig
from pathlib import Path

import pytest


def site_directories() -> set[Path]:
    """This interpreter's site-packages directories (the venv's, under a venv)."""
    paths = sysconfig.get_paths()
    found = {*site.getsitepackages(), paths["purelib"], paths["platlib"]}
    if site.ENABLE_USER_SITE:
        found.add(site.getusersitepackages())
    return {Path(directory).resolve() for directory in found}


def installed_pth() -> Path | None:
    """The fastloop.pth that pip put in site-packages, if any."""
    for directory in site_directories():
        candidate = directory / "fastloop.pth"
        if candidate.exists():
            return candidate
    return None


def require_installed_pth() -> Path:
    """Skip locally, fail under CI, when fastloop was not installed from a wheel."""
    found = installed_pth()
    if found is None:
        message = "fastloop.pth is not in site-packages: install with `pip install .`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found
