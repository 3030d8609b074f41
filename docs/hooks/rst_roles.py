"""A mkdocs hook: the library's docstrings are written for Sphinx-style readers
(``:func:`name```, ``Example::``); in the rendered API pages the role names and the doubled colon
are dropped, leaving the name in code and a plain colon."""

from __future__ import annotations

import re

ROLE = re.compile(r"~?:(?:py:)?(?:func|meth|class|mod|attr|data|exc|obj):(?=<code>)")
LITERAL = re.compile(r"::(?=</p>)")


def on_page_content(html, page, config, files):
    if not page.file.src_uri.startswith("reference/api/"):
        return html
    return LITERAL.sub(":", ROLE.sub("", html))
