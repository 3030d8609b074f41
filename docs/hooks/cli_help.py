"""A mkdocs hook: ``<!-- cli-help: NAME -->`` in a page becomes the ``--help`` text of
``python -m h2o NAME`` (``<!-- cli-help: -->`` the top level's), read from the installed package's
own parser, so the reference page says what the command says."""

from __future__ import annotations

import os
import re

MARKER = re.compile(r"<!-- cli-help: ?([a-z-]*) -->")


def _help(name: str) -> str:
    from h2o.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal's width
    parser = build_parser()
    if not name:
        return parser.format_help()
    for action in parser._subparsers._group_actions:  # argparse keeps its subparsers there
        if name in action.choices:
            return action.choices[name].format_help()
    raise KeyError(f"docs: no command {name!r} in python -m h2o")


def on_page_markdown(markdown, page, config, files):
    return MARKER.sub(lambda m: f"```text\n{_help(m.group(1)).rstrip()}\n```", markdown)
