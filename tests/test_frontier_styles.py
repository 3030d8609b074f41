"""The frontier's line styles come from each row's label in the library's row grammar, never
from the family's display name (a family renamed for the page keeps its style)."""

from __future__ import annotations

from app.figures import needle as figures
from app.figures.base import POLICY_COLOURS
from app.needle import frontier
from h2o.alloc import ALLOCATORS
from h2o.model import caches


def point(row: str, group: str, family: str = "a family named for people", **kw) -> frontier.Point:
    base = {"policy": None, "bits": None, "sinks": 0, "x": 1000.0, "y": 0.5}
    return frontier.Point(row=row, family=family, group=group, **{**base, **kw})


def style(p: frontier.Point) -> dict:
    (line,) = frontier.figure_lines([p], str)
    return figures.family_style(line.group, line.method, line.bits, line.allocation, line.sinks)


def test_the_facts_are_the_rows():
    assert frontier.cache_facts(point("snapkv@256:avg5", "evict")) == ("snapkv", None, 0)
    assert frontier.cache_facts(point("h2o@128/pyramid", "evict")) == ("h2o", "pyramid", 0)
    assert frontier.cache_facts(point("kivi2+sinks", "compress", bits=2)) == (None, None, 4)
    assert frontier.cache_facts(point("tova@64+kivi4", "both", bits=4)) == ("tova", None, 0)


def test_styles_follow_the_row_not_the_family_name():
    snap = style(point("snapkv@256", "evict"))  # its policy field empty, as in older files
    assert snap["color"] == figures.method_mark("snapkv")[0]  # the kind's own, from the row
    assert snap["color"] != style(point("h2o@256", "evict"))["color"]
    assert style(point("h2o@128/pyramid", "evict"))["dash"] == ALLOCATORS["pyramid"].dash
    assert style(point("h2o@128/duo", "evict"))["dash"] == ALLOCATORS["duo"].dash
    assert style(point("h2o@128", "evict"))["dash"] == "solid"
    assert style(point("kivi4+sinks", "compress", bits=4))["symbol"] == "diamond-open"
    assert style(point("kivi4", "compress", bits=4))["symbol"] == "diamond"
    # The display name says "sinks" and "pyramid"; the rows say neither: no effect.
    misleading = "pyramid sinks snapkv"
    assert style(point("kivi4", "compress", misleading, bits=4))["symbol"] == "diamond"
    assert style(point("h2o@128", "evict", misleading))["dash"] == "solid"


def test_a_row_of_a_policy_this_server_does_not_know_keeps_what_the_file_says():
    p = point("mine@128", "evict", policy="mine", sinks=0)
    assert frontier.cache_facts(p) == ("mine", None, 0)


def test_the_methods_that_choose_once_are_told_apart():
    """SnapKV, K-norm, KVzip, Expected Attention and Quest are not policies of the registry (no
    colour of their own there): each still has its own colour and marker on the frontier, and a
    combination stays dashed."""
    methods = ("snapkv", "knorm", "kvzip", "expected-attention", "quest")
    styles = {m: figures.family_style("evict", m, None, None, 0) for m in methods}
    marks = {(s["color"], s["symbol"]) for s in styles.values()}
    assert len(marks) == len(methods)
    assert len({s["color"] for s in styles.values()}) == len(methods)
    assert not {s["color"] for s in styles.values()} & set(figures.BITS_COLOURS.values())
    assert not {s["color"] for s in styles.values()} & set(POLICY_COLOURS.values())
    assert figures.family_style("both", "snapkv", 4, None, 0)["dash"] == "dash"


def test_each_allocation_is_dashed_its_own_way():
    """The allocators' dashes are facts on their classes, one apiece; no allocation is solid but
    the uniform one (the same line as no allocation)."""
    dashes = {name: cls.dash for name, cls in ALLOCATORS.items()}
    assert len(set(dashes.values())) == len(dashes)
    assert [n for n, d in dashes.items() if d == "solid"] == ["uniform"]
    assert figures.alloc_dash(None) == figures.alloc_dash("not an allocation") == "solid"


def test_a_subclass_of_a_method_is_not_drawn_as_it():
    """A kind's colour is read from its own class: a subclass of K-norm that changes the rule
    gets the policy colours' fallback, not K-norm's mark."""
    sub = type("Sharper", (caches.KnormCache,), {"kind": "sharper"})
    caches.register(sub)
    try:
        assert figures.method_mark("sharper") is None
        assert figures.method_mark("knorm") == (caches.KnormCache.colour, caches.KnormCache.marker)
    finally:
        caches.unregister("sharper")


def test_a_selection_row_is_styled_by_its_kind():
    """Quest has no policy: its style still comes from its row (its kind), not its name."""
    p = point("quest@128", "select", policy=None)
    assert frontier.cache_facts(p) == ("quest", None, 0)
    assert (style(p)["color"], style(p)["symbol"]) == (
        caches.QuestCache.colour,
        caches.QuestCache.marker,
    )
    assert frontier.cache_facts(point("kivi4", "compress", bits=4))[0] is None
