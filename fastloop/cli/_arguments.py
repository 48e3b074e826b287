"""Argument types the subcommands share: comma lists of names, and settings."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

#: What ``add_subparsers`` returns: each command adds its own parser to it.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def names(kind: str, known: Callable[[], Sequence[str]]) -> Callable[[str], list[str]]:
    """An argparse type: a comma list, each name one of ``known()``."""

    def parse(text: str) -> list[str]:
        valid = known()
        chosen = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in chosen if name not in valid]
        if unknown or not chosen:
            raise argparse.ArgumentTypeError(
                f"unknown {kind} {', '.join(unknown) or repr(text)}; "
                f"choose from {', '.join(valid)}"
            )
        return chosen

    return parse


def setting(parse: Callable[[object], Any]) -> Callable[[str], Any]:
    """An argparse type from a setting's parser (``fastloop.config``)."""
    from fastloop.config import SettingError

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except SettingError as accepted:
            raise argparse.ArgumentTypeError(
                f"expected {accepted}, got {text!r}"
            ) from None

    return convert
