"""The app's one script (``app.a11y.POINTER_FOCUS_JS``) survives Streamlit's sanitizer.

``st.html`` passes its body through DOMPurify, whose ``SAFE_FOR_XML`` check removes an element
whose inner HTML holds ``<`` before a letter, ``/`` or ``!`` — a script that merely names a tag
in a comment is dropped without a word, and with it the pointer-focus mark and the code
scrollers' Tab stop (the browser tests see the effects; this reads the rule)."""

from __future__ import annotations

import re

from app.a11y import POINTER_FOCUS_JS


def test_the_script_names_no_tag_the_sanitizer_would_drop_it_for():
    m = re.fullmatch(r"<script data-h2o-pointer-focus-script>(.*)</script>", POINTER_FOCUS_JS, re.S)
    assert m, "one script element, and nothing around it"
    body = m.group(1)
    assert body.strip()
    assert not re.search(r"<[/\w!]", body), re.search(r".{0,40}<[/\w!].{0,20}", body).group(0)
