"""The full support matrix (``fastloop/patches/verified.py``'s ``SUPPORTED``).

PYENV_VERSION=3.11.7:3.12.1:3.13.0 nox                   # every cell
nox -s "tests(python='3.13', tornado='6.6')"             # one cell
nox -s "tests_sid(minor='3.15', tornado='6.6')"          # Debian sid's 3.15 (root)

Each cell adds its fingerprints to that file's ``VERIFIED`` before its suite
runs: commit them when the suite passed (``fastloop.patches.fingerprints``).
"""

from __future__ import annotations

import os
import runpy
import shlex

import nox

nox.options.default_venv_backend = "venv"

#: What ruff checks and formats (mypy reads its files from pyproject.toml).
LINTED = ["fastloop", "pytest_fastloop.py", "tests", "bench", "noxfile.py"]

VERIFIED = "fastloop/patches/verified.py"
SUPPORTED: dict[str, tuple[str, ...]] = runpy.run_path(VERIFIED)["SUPPORTED"]
#: CPythons this machine's Debian lacks: Debian sid's, in a chroot that
#: .ci/sid_pythons.sh builds once (as root).
SID_PYTHONS = ["3.14", "3.15"]
CELLS = [
    (python, tornado)
    for python, tornados in SUPPORTED.items()
    if python not in SID_PYTHONS
    for tornado in tornados
]
SID_CELLS = [
    (python, tornado)
    for python, tornados in SUPPORTED.items()
    if python in SID_PYTHONS
    for tornado in tornados
]
#: Adds the cell's fingerprints to the table before its suite runs (from the
#: checkout, which the working directory puts first; fastloop.patches.fingerprints).
RECORD = ["python", "-m", "fastloop.patches.fingerprints", "--into", VERIFIED]


#: The pages that show the table, brought up to date after a cell adds to it.
RENDER = ["python", "bench/render_docs.py"]


@nox.session
@nox.parametrize(("python", "tornado"), CELLS)
def tests(session: nox.Session, tornado: str) -> None:
    session.install(f"tornado=={tornado}.*")
    session.run(*RECORD)
    session.install(".[test]")
    session.run(*RENDER)
    # The pytest script, not `python -m pytest`: that would put the checkout
    # first on sys.path, and the tests must import the installed wheel.
    session.run("pytest", "-q", *session.posargs, env={"CI": "true"})


@nox.session(python=False)
@nox.parametrize(("minor", "tornado"), SID_CELLS)
def tests_sid(session: nox.Session, minor: str, tornado: str) -> None:
    """The README's test command on Debian sid's CPython ``minor``."""
    here = os.getcwd()
    venv = f"/tmp/fastloop-sid-{minor}-{tornado}"
    command = (
        f"cd {shlex.quote(here)} && python{minor} -m venv {venv} && "
        f"{venv}/bin/pip install -q 'tornado=={tornado}.*' && "
        f"{venv}/bin/{shlex.join(RECORD)} && "
        f"{venv}/bin/pip install -q '.[test]' && "
        f"{venv}/bin/{shlex.join(RENDER)} && "
        f"CI=true {venv}/bin/pytest -q {shlex.join(session.posargs)}"
    )
    session.run(
        "bash", ".ci/sid_pythons.sh", "--bind", here, "bash", "-c", command,
        external=True,
    )  # fmt: skip


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    session.install(".[lint]")
    session.run("ruff", "check", *LINTED)
    session.run("ruff", "format", "--check", *LINTED)
    session.run("mypy")
