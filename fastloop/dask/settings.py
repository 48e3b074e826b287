"""fastloop's settings where dask users keep theirs: dask's config, preload arguments.

Every row of ``fastloop.config.SETTINGS`` has a key in a ``fastloop:``
section of dask's config, its name with dashes (``block_ms`` is
``fastloop.block-ms``), so yaml files and ``DASK_FASTLOOP__BLOCK_MS=50``
work as they do for dask's own settings; ``fastloop.patches`` chooses the
patches as ``FASTLOOP`` does (a comma list, or a yaml list).  The preload
takes the same as arguments (``--block-ms 50``, ``--patches all,poll``),
per process.  One value, four places; the first that has it wins:

1. the ``FASTLOOP_*`` variable (``FASTLOOP`` for the patches): set on
   purpose for this process, so it beats what a whole cluster shares;
2. the preload's argument;
3. dask's config;
4. the default.

A bad value or an unknown key gives one line and the rest still applies:
configuration never stops a dask server.  A bad value falls through to the
next place, except a ``FASTLOOP`` with no usable name: start-up read it
before the preload and installed nothing, and the preload agrees.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastloop import config
from fastloop.patches import registry

#: dask's config section, and the key that chooses the patches.
SECTION = "fastloop"
#: How a problem or a source names the places only dask servers read: the
#: section (``dask config fastloop.block-ms``), the preload's arguments.
CONFIG = f"dask config {SECTION}"
ARGUMENTS = "preload argument"
PATCHES = "patches"
DEFAULT = "default"


def key(name: str) -> str:
    """A setting's key in dask's config and its preload option, without ``--``."""
    return name.replace("_", "-")


def keys() -> list[str]:
    """Every key the section and the preload accept, in the settings' order."""
    return [PATCHES, *(key(row.name) for row in config.SETTINGS)]


class Chosen:
    """What applies in a process, where each value came from, and what was bad.

    ``patches`` is ``config.parse_patches``'s answer (None: the default
    set); ``sources`` maps ``"patches"`` and each setting's name to where its
    value came from (``DEFAULT`` when nothing set it).
    """

    def __init__(self) -> None:
        self.patches: frozenset[str] | None = None
        self.values: dict[str, object] = {}
        #: dask's config's values as found, by key (what doctor shows).
        self.configured: dict[str, object] = {}
        self.sources: dict[str, str] = {}
        self.problems: list[config.Problem] = []


def choose(
    environ: Mapping[str, str],
    arguments: Sequence[str] = (),
    section: Any = None,
) -> Chosen:
    """The settings and patches of a dask server, by the precedence above."""
    chosen = Chosen()
    given, problems = _from_arguments(arguments)
    chosen.problems += problems
    from_config, problems = _from_section({} if section is None else section)
    chosen.problems += problems
    chosen.configured = from_config
    places = (
        (f"{ARGUMENTS} --{{key}}", given),
        (f"{CONFIG}.{{key}}", from_config),
    )
    known, default = registry.known(), registry.default_set()

    chosen.sources[PATCHES] = DEFAULT
    patch_places = [("FASTLOOP", environ.get("FASTLOOP", "").strip() or None)] + [
        (where.format(key=PATCHES), str(values[PATCHES]))
        for where, values in places
        if PATCHES in values
    ]
    for place, listed in patch_places:
        if listed is None:
            continue
        patches, problems = config.parse_patches(listed, known, place, default)
        chosen.problems += problems
        if problems and not patches and place != "FASTLOOP":
            # Nothing usable here: the next place's value applies.  Not for
            # FASTLOOP, which start-up read first: it installed nothing.
            for problem in problems:
                problem.outcome = "the next place applies"
            continue
        chosen.patches, chosen.sources[PATCHES] = patches, place
        break

    for row in config.SETTINGS:
        chosen.sources[row.name] = DEFAULT
        candidates = [(row.variable, environ.get(row.variable))] + [
            (where.format(key=key(row.name)), values.get(key(row.name)))
            for where, values in places
            if key(row.name) in values
        ]
        for source, raw in candidates:
            if source == row.variable and raw is None:
                continue
            try:
                chosen.values[row.name] = row.parse(raw)
            except config.SettingError as accepted:
                text = str(raw)
                chosen.problems.append(
                    config.Problem(source, text, (text.strip() or text,), str(accepted))
                )
                continue  # a bad value falls through to the next place
            chosen.sources[row.name] = source
            break
    return chosen


def _from_arguments(
    arguments: Sequence[str],
) -> tuple[dict[str, str], list[config.Problem]]:
    """``--key value`` and ``--key=value`` pairs, by key."""
    known = keys()
    accepted = "--" + ", --".join(known) + ", each with a value"
    found: dict[str, str] = {}
    bad: list[str] = []
    tokens = list(arguments)
    while tokens:
        token = tokens.pop(0)
        name, equals, value = token.partition("=")
        name = name[2:] if name.startswith("--") else ""
        name = name.replace("_", "-")
        if name not in known:
            bad.append(token)
            continue
        if not equals:
            if not tokens or tokens[0].startswith("--"):
                bad.append(token)
                continue
            value = tokens.pop(0)
        found[name] = value
    shown = " ".join(arguments)
    problems = [config.Problem(f"{ARGUMENTS}s", shown, tuple(bad), accepted)]
    return found, problems if bad else []


def _from_section(section: Any) -> tuple[dict[str, object], list[config.Problem]]:
    """The section's values by canonical key (dask treats ``_`` and ``-`` alike)."""
    if not isinstance(section, Mapping):
        return {}, [config.Problem(CONFIG, str(section), (str(section),), "a mapping")]
    known = keys()
    found: dict[str, object] = {}
    bad: list[str] = []
    for raw_key, value in section.items():
        name = str(raw_key).replace("_", "-")
        if name not in known:
            bad.append(str(raw_key))
        elif name == PATCHES and not isinstance(value, str):
            found[name] = _patch_list(value)
        else:
            found[name] = value
    accepted = ", ".join(known)
    problems = [config.Problem(CONFIG, None, tuple(bad), accepted)]
    return found, problems if bad else []


def _patch_list(value: object) -> str:
    """yaml's forms of ``FASTLOOP``: a list of names, or a boolean."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value)
    return str(value)


def dask_section() -> Any:
    """dask's ``fastloop:`` section as configured here, whatever it holds
    (``choose`` says so if it is not a mapping); None without dask."""
    try:
        import dask.config
    except ImportError:
        return None
    return dask.config.get(SECTION, default={})
