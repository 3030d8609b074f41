"""The needles: facts of one shape that the haystack cannot suggest, and the matcher of answers.

Every needle is "The code of the <colour> <thing> is <four digits>." and is asked as "What is
the code of the <colour> <thing>?". The codes were drawn once at random (numpy seed 17, four
digits, at least three of them distinct) and are written out here so that they never change;
the shipped texts (``traces/texts/``) contain no digit at all, so a right answer can only come
from the needle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: (colour, thing, code) of every needle; the id is ``"<colour>-<thing>"``.
_FACTS: tuple[tuple[str, str, str], ...] = (
    ("green", "locker", "9237"),
    ("red", "safe", "7627"),
    ("blue", "suitcase", "3286"),
    ("yellow", "gate", "7854"),
    ("purple", "cabinet", "5121"),
    ("orange", "padlock", "1449"),
    ("silver", "trunk", "4312"),
    ("white", "drawer", "2934"),
    ("black", "box", "8605"),
    ("brown", "door", "1322"),
    ("golden", "chest", "4472"),
    ("grey", "mailbox", "6019"),
    ("pink", "briefcase", "5106"),
    ("copper", "vault", "7668"),
    ("violet", "crate", "1966"),
    ("amber", "cupboard", "6268"),
    ("scarlet", "barrel", "2448"),
    ("ivory", "casket", "1137"),
    ("olive", "shed", "6742"),
    ("navy", "wardrobe", "1819"),
    ("teal", "bicycle lock", "6437"),
    ("bronze", "strongbox", "6502"),
    ("crimson", "garage", "4853"),
    ("indigo", "cellar", "4294"),
)


@dataclass(frozen=True)
class Needle:
    """One fact, its question, and the answer the model must produce."""

    id: str
    colour: str
    thing: str
    value: str

    @property
    def subject(self) -> str:
        return f"the code of the {self.colour} {self.thing}"

    @property
    def sentence(self) -> str:
        """The fact as it is hidden in the haystack (one sentence)."""
        return f"The code of the {self.colour} {self.thing} is {self.value}."

    @property
    def question(self) -> str:
        return f"What is the code of the {self.colour} {self.thing}?"


NEEDLES: tuple[Needle, ...] = tuple(
    Needle(f"{c}-{t.replace(' ', '-')}", c, t, v) for c, t, v in _FACTS
)
BY_ID: dict[str, Needle] = {n.id: n for n in NEEDLES}


def needle(key: str | int) -> Needle:
    """A needle by id (``"green-locker"``) or by index into :data:`NEEDLES`."""
    if isinstance(key, int):
        if not 0 <= key < len(NEEDLES):
            raise ValueError(f"needle index {key} is out of range 0..{len(NEEDLES) - 1}")
        return NEEDLES[key]
    if key not in BY_ID:
        raise ValueError(f"unknown needle {key!r}; known: {', '.join(BY_ID)}")
    return BY_ID[key]


def first_line(produced: str) -> str:
    """The answer the grid scores: the produced text's first non-empty line, stripped."""
    for line in produced.splitlines():
        if line.strip():
            return line.strip()
    return ""


def is_correct(produced: str, expected: str) -> bool:
    """``expected`` occurs in the first line of ``produced`` as a whole word or number.

    "9237." and "is 9237" match 9237; "19237", "92370" and "9237x" do not (a longer number or
    word that merely contains the code is a different answer)."""
    if not expected:
        raise ValueError("the expected answer is empty")
    pattern = r"(?<![0-9A-Za-z])" + re.escape(expected) + r"(?![0-9A-Za-z])"
    return re.search(pattern, first_line(produced)) is not None
