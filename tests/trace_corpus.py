"""The hostile-file corpus of the trace loader, and the check each case is made for.

For each member of the format (format, name, meta, tokens, weights, attention): truncations,
header-shape lies, deflate bombs (honest and lying zip sizes), bad dtypes, pickled object arrays
and bad unicode; then archive-level damage, deep meta, bad values and limits read from headers.
:func:`expected_check` names, for every case, the one check of ``h2o/trace_npz.py`` that must refuse
it (:data:`CHECKS`: its message), so that a check that stops working is seen.
"""

from __future__ import annotations

import json
import struct
import zipfile
from collections.abc import Callable

import numpy as np
from npz_forge import (
    BOMB,
    MEMBERS,
    SHAPES,
    T,
    archive,
    base,
    bomb_stream,
    declared,
    dense,
    entries_of,
    header_len,
    layout_for,
    npy,
    packed,
    raw_archive,
    save,
    with_member,
)

from h2o.trace import MAX_STEPS
from h2o.trace import offset as _offset

TRIPPED: list[str] = []


def _trip(*args: object) -> None:
    TRIPPED.append("unpickled")  # never called: object arrays are refused, not loaded


class Tripwire:
    def __reduce__(self):
        return (_trip, ())


# -- the corpus --------------------------------------------------------------------------------
Case = tuple[str, Callable[[], bytes]]


def member_cases(key: str) -> list[Case]:
    shape, dtype = SHAPES[key]
    good = base(layout_for(key))[key]
    hl = header_len(good)
    data = good[hl:]
    count = int(np.prod(shape))
    out: list[Case] = []
    # truncations of the member (the zip's own sizes are honest)
    for k in sorted({0, 1, 6, 8, 9, 10, hl - 1, hl, hl + 1, len(good) - 1}):
        if 0 <= k < len(good):
            out.append((f"{key}-truncated-{k}", lambda k=k: with_member(key, good[:k])))
    # header-shape lies, with the data as they are
    lies = {
        "huge": (10**13,) * max(1, len(shape)),
        "enormous": (10**100,),
        "bigger": (count + 7,) if len(shape) < 2 else (shape[0] + 1, shape[1] + 1),
        "smaller": (max(count - 1, 0),) if len(shape) < 2 else (shape[0] - 1, shape[1] - 1),
        "negative": (-1,),
        "ndim": (*shape, 1),
        "0-d": (),
        "not-ints": (2.5,),
    }
    descr = dtype.str
    for lie, s in lies.items():
        if s == shape:
            continue
        out.append(
            (
                f"{key}-shape-{lie}",
                lambda s=s: with_member(
                    key,
                    npy(
                        descr,
                        (),
                        data,
                        header=f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {s!r}, }}",
                    ),
                ),
            )
        )
    # a lie the zip agrees with: the data padded (or cut) to the shape the header claims
    if key in ("tokens", "weights"):
        s = (count + 1,)
        out.append(
            (
                f"{key}-shape-lie-with-matching-data",
                lambda s=s: with_member(key, npy(descr, s, data + bytes(dtype.itemsize))),
            )
        )
    # deflate bombs: the header as it is, BOMB zeros behind it
    header = good[:hl]

    def bomb(lying: bool) -> bytes:
        comp, crc = bomb_stream(header)
        members = {k: v for k, v in base(layout_for(key)).items() if k != key}
        size = len(good) if lying else hl + BOMB
        return raw_archive([*entries_of(members), (f"{key}.npy", comp, crc, size, 8, 0)])

    out.append((f"{key}-bomb-honest-sizes", lambda: bomb(False)))
    out.append((f"{key}-bomb-lying-sizes", lambda: bomb(True)))
    # a bomb the header declares in full (an honest, huge array of zeros): the weights are
    # refused at their first row, the strings for their length, from the header
    big = {
        "weights": ((_offset(4000),), "<f4"),
        "attention": ((4000, 4000), "<f4"),
        "tokens": ((T,), "<U100000"),
        "meta": ((), "<U1000000"),
        "name": ((), "<U100000"),
        "format": ((), "<U100000"),
    }[key]

    def declared_bomb(s=big[0], d=big[1]) -> bytes:
        members = base(layout_for(key))
        if key in ("weights", "attention"):
            del members["tokens"]  # so that the rows themselves are what is refused
        members[key] = npy(d, s, bytes(int(np.prod(s)) * np.dtype(d).itemsize))
        return archive(members)

    out.append((f"{key}-declared-zeros", declared_bomb))
    # bad dtypes, with data of the right size
    bad = ["<i4", "<c8", "|b1", "<f16", "<M8[D]", "|V4", "<u2"]
    bad += ["<U3", "|S3"] if key in ("weights", "attention") else ["<f4", "<f8", "<i8"]
    for d in bad:
        nbytes = count * np.dtype(d).itemsize
        out.append(
            (f"{key}-dtype-{d}", lambda d=d, n=nbytes: with_member(key, npy(d, shape, bytes(n))))
        )
    out.append(
        (
            f"{key}-structured",
            lambda: with_member(key, save(np.zeros(shape, dtype=[("a", "<f4"), ("b", "<f4")]))),
        )
    )

    # pickled object arrays (a tripwire that records being unpickled)
    def pickled() -> bytes:
        a = np.empty(shape, dtype=object)
        a.fill(Tripwire())
        return with_member(key, save(a, allow_pickle=True))

    out.append((f"{key}-pickled", pickled))
    # bad unicode (string members)
    if key in ("format", "name", "meta", "tokens"):
        chars = 4
        for cp in (0x110000, 0xD800, 0xFFFFFFFF):
            for order in "<>":
                fmt = order + "I" * (count * chars)
                cps = [ord("a")] * (count * chars)
                cps[-1] = cp
                out.append(
                    (
                        f"{key}-codepoint-{cp:x}-{order}",
                        lambda fmt=fmt, cps=cps, order=order: with_member(
                            key, npy(f"{order}U{chars}", shape, struct.pack(fmt, *cps))
                        ),
                    )
                )
        out.append(
            (
                f"{key}-bytes-not-utf8",
                lambda: with_member(key, npy("|S4", shape, b"ab\xff\xfe" * count)),
            )
        )
    return out


def meta_cases() -> list[Case]:
    def meta(text: str) -> Callable[[], bytes]:
        return lambda: with_member("meta", save(np.array(text)))

    return [
        ("meta-nested-100000", meta("[" * 100_000 + "]" * 100_000)),
        ("meta-nested-30000", meta('{"a":' + "[" * 30_000 + "]" * 30_000 + "}")),
        ("meta-nested-33", meta('{"a":' * 33 + "1" + "}" * 33)),
        ("meta-not-json", meta("{not json")),
        ("meta-not-an-object", meta("[1, 2]")),
        ("meta-long-int", meta('{"a": ' + "9" * 5000 + "}")),
        ("meta-lone-surrogate", meta('{"a": "\\ud800"}')),
        ("meta-surrogate-key", meta('{"\\udfff": 1}')),
        ("meta-too-long", meta(json.dumps({"a": "x" * 70_000}))),
    ]


def archive_cases() -> list[Case]:
    good = archive(base())
    members = base()
    out: list[Case] = [
        (f"archive-truncated-{k}", lambda k=k: good[:k])
        for k in sorted({0, 1, 2, 3, 4, 10, 30, *range(50, len(good), max(1, len(good) // 40))})
    ]
    out += [
        ("archive-empty-zip", lambda: archive({})),
        ("archive-only-other-members", lambda: archive({"other": save(np.ones(3))})),
        (
            "archive-weights-without-npy-suffix",
            lambda: archive({"weights.bin": members["weights"]}),
        ),
        ("archive-both-layouts", lambda: archive({**base(), "attention": save(dense())})),
        (
            "archive-duplicate-member",
            lambda: raw_archive([*entries_of(base()), *entries_of({"weights": save(packed())})]),
        ),
        (
            "archive-encrypted-flag",
            lambda: raw_archive(
                [
                    (n, c, crc, s, m, 0x1 if n == "weights.npy" else 0)
                    for n, c, crc, s, m, _ in entries_of(base())
                ]
            ),
        ),
        ("archive-bzip2", lambda: archive(base(), zipfile.ZIP_BZIP2)),
        ("archive-lzma", lambda: archive(base(), zipfile.ZIP_LZMA)),
        (
            "archive-unknown-method",
            lambda: raw_archive(
                [(n, c, crc, s, 99, f) for n, c, crc, s, m, f in entries_of(base())]
            ),
        ),
        ("archive-65-members", lambda: archive({**base(), **{f"x{i}": b"" for i in range(60)}})),
        (
            "archive-bad-crc",
            lambda: raw_archive(
                [(n, c, crc ^ 1, s, m, f) for n, c, crc, s, m, f in entries_of(base())]
            ),
        ),
        (
            "archive-corrupt-deflate",
            lambda: raw_archive(
                [(n, b"\xff" * len(c), crc, s, m, f) for n, c, crc, s, m, f in entries_of(base())]
            ),
        ),
        ("archive-not-npy-member", lambda: with_member("weights", b"PK\x03\x04 not an array")),
        (
            "npy-version-9",
            lambda: with_member("weights", npy("<f4", (15,), bytes(60), version=(9, 9))),
        ),
        (
            "npy-v2-header-2GB",
            lambda: with_member("weights", b"\x93NUMPY\x02\x00" + (2**31).to_bytes(4, "little")),
        ),
        (
            "npy-v1-header-64KB",
            lambda: with_member("weights", b"\x93NUMPY\x01\x00\xff\xff" + b" " * 65535),
        ),
        ("npy-header-not-dict", lambda: with_member("weights", npy("", (), header="[1, 2, 3]"))),
        (
            "npy-header-missing-keys",
            lambda: with_member("weights", npy("", (), header="{'descr': '<f4'}")),
        ),
        (
            "npy-header-extra-key",
            lambda: with_member(
                "weights",
                npy(
                    "",
                    (),
                    header="{'descr': '<f4', 'fortran_order': False, 'shape': (15,), 'x': 1}",
                ),
            ),
        ),
        (
            "npy-header-fortran-not-bool",
            lambda: with_member(
                "weights",
                npy("", (), header="{'descr': '<f4', 'fortran_order': 1, 'shape': (15,)}"),
            ),
        ),
        (
            "npy-header-unparsable",
            lambda: with_member("weights", npy("", (), header="{'descr': ,,,}")),
        ),
        (
            "npy-header-deep-parens",
            lambda: with_member("weights", npy("", (), header="(" * 4000 + ")" * 4000)),
        ),
        (
            "npy-header-long-int",
            lambda: with_member("weights", npy("", (), header="{'shape': (" + "9" * 5000 + ",)}")),
        ),
        (
            "npy-v3-header-not-utf8",
            lambda: with_member("weights", npy("", (), header="{'descr': '\xff'}", version=(3, 0))),
        ),
        ("npy-bad-magic", lambda: with_member("weights", b"\x93NUMPZ\x01\x00" + bytes(100))),
    ]
    return out


def value_cases() -> list[Case]:
    def weights(a: np.ndarray) -> Callable[[], bytes]:
        return lambda: with_member("weights", save(a))

    def attention(a: np.ndarray, order: str = "C") -> Callable[[], bytes]:
        return lambda: with_member("attention", save(np.asarray(a, order=order)))

    p, d = packed(), dense()
    out: list[Case] = []
    for dt in (np.float16, np.float32, np.float64):
        for bad, v in (("nan", np.nan), ("inf", np.inf), ("negative", -0.5), ("big", 1e4)):
            q = p.astype(dt)
            q[-2] = v
            out.append((f"weights-{np.dtype(dt).name}-{bad}", weights(q)))
    for order in "CF":
        for bad, v in (("nan", np.nan), ("negative", -0.5), ("zero-row", 0.0)):
            e = d.copy()
            e[T - 1, : T - 1] = v
            out.append((f"attention-{order}-{bad}", attention(e, order)))
    out += [
        ("weights-not-triangular", weights(np.ones(4, np.float32))),
        ("weights-one-step", weights(np.zeros(0, np.float32))),
        ("attention-not-square", attention(np.ones((3, 4), np.float32))),
        ("format-other", lambda: with_member("format", save(np.array("other/9")))),
        ("tokens-too-few", lambda: with_member("tokens", save(np.array(["a"] * (T - 1))))),
        ("tokens-2-d", lambda: with_member("tokens", save(np.array([["a"] * T])))),
        ("tokens-too-long", lambda: with_member("tokens", save(np.array(["x" * 300] * T)))),
        ("name-too-long", lambda: with_member("name", save(np.array("x" * 300)))),
        ("name-1-d", lambda: with_member("name", save(np.array(["a", "b"])))),
    ]
    return out


def limit_cases() -> list[Case]:
    """Files refused by a limit read from the header and the zip sizes alone."""
    others = entries_of({k: v for k, v in base("attention").items() if k != "tokens"})
    n = MAX_STEPS + 1
    return [
        ("npy-not-an-archive", lambda: save(packed())),
        (
            "attention-too-many-steps",  # 268 MB declared, 1/50 of it stored: no bomb, too big
            lambda: raw_archive(
                [*others[:-1], declared("attention", "<f4", (n, n), compressed=n * n * 4 // 50)]
            ),
        ),
        (
            "weights-compresses-too-well",  # 72 MB declared in 200 stored bytes
            lambda: raw_archive(
                [*entries_of(base())[:-1], declared("weights", "<f4", (_offset(6000),))]
            ),
        ),
    ]


CORPUS: list[Case] = [
    *(c for key in MEMBERS for c in member_cases(key)),
    *meta_cases(),
    *archive_cases(),
    *value_cases(),
    *limit_cases(),
]


# -- which check refuses each case --------------------------------------------------------------
#: Every refusal of the loader, by the words of its message. A check that stopped working would
#: let its cases through to a later check (or load them): each is named by the case it must catch.
CHECKS = {
    "single-npy": r"^not a trace file: expected an \.npz archive, got a single \.npy array$",
    "magic": r"^not an \.npz file \(",
    "zip": r"^not a readable \.npz file \(the archive\): BadZipFile",
    "damaged": r"^damaged \.npz file \('\w+'\): \w+",
    "members": r"^the archive has 65 members; at most 64$",
    "duplicate": r"^the archive has two 'weights\.npy' members$",
    "encrypted": r"^'weights\.npy' is encrypted$",
    "method": r"^'format\.npy' uses compression method \d+; ",
    "no-weights": r"^not a trace file: found arrays \[.*\], expected 'weights' or 'attention'$",
    "both": r"^the archive has both 'weights' and 'attention'; a trace has one$",
    "truncated": r"^'\w+' is truncated: the archive member ends early$",
    "npy-magic": r"^'weights' is not a \.npy array$",
    "npy-version": r"^'weights' has \.npy format version 9\.9$",
    "header-length": r"^'weights' has a \d+-byte header; at most 10000$",
    "size-fewer": r"^'\w+' declares shape .* but the archive member holds (?P<fewer>\d+) bytes",
    "size-more": r"^'\w+' declares shape .* but the archive member holds (?P<more>\d+) bytes",
    "bomb": r"^'weights' would inflate \d+-fold, .* decompression bomb",
    "header-syntax": r"^'weights' has an unreadable \.npy header$",
    "header-keys": r"^'weights' has a malformed \.npy header$",
    "header-fortran": r"^'weights' has a malformed \.npy header \(fortran_order\)$",
    "header-shape": r"^'\w+' has an invalid shape .* in its header$",
    "structured": r"^'\w+' is a structured array; a trace holds plain arrays$",
    "pickled": r"^'\w+' holds pickled \(object\) data; it is refused, never unpickled$",
    "dtype": r"^'\w+' has dtype .*; a trace holds float16/32/64 weights and strings$",
    "weights-shape": r"^'weights' must be a 1-D float array, got ",
    "attention-shape": r"^'attention' must be a square float matrix, got ",
    "too-many-steps": rf"^trace has {MAX_STEPS + 1} steps; at most {MAX_STEPS} are accepted$",
    "one-step": r"^a trace needs at least 2 steps \(one row of attention\), got 1$",
    "string-shape": r"^'\w+' must be (a string|an array of strings), got shape ",
    "string-length": r"^'\w+' holds strings of up to \d+ characters; at most (64|256|65536)$",
    "tokens-shape": r"^'tokens' must be a 1-D array of strings, got shape ",
    "tokens-count": r"^\d+ tokens for a trace of 6 steps$",
    "format": r"^unsupported trace format 'other/9' \(this version reads h2o-trace/1\)$",
    "codepoint": r"^'\w+' holds an invalid character U\+[0-9A-F]+( \(entry 5\))?$",
    "utf8": r"^'\w+' is not valid UTF-8 \(",
    "meta-json": r"^malformed trace file: meta is not valid JSON \(Expecting",
    "meta-int": r"^malformed trace file: meta is not valid JSON \(an integer of 5000 digits\)$",
    "meta-object": r"^meta must be a JSON object$",
    "meta-depth": r"^meta nests deeper than 32 levels$",
    "meta-surrogate": r"^meta holds an invalid character \(a lone surrogate\)$",
    "not-triangular": r"^packed weights have length \d+, which is not T\(T-1\)/2 ",
    "non-finite": r"^trace has a non-finite weight \(NaN or inf\) in row 5$",
    "negative": r"^trace has a negative weight in row 5$",
    "row-sum": r"^row (1|5) of the trace sums to \d+\.\d{6}, not 1$",
}

_STRING_SHAPE = {
    "format": "string-shape",
    "name": "string-shape",
    "meta": "string-shape",
    "tokens": "tokens-shape",
    "weights": "weights-shape",
    "attention": "attention-shape",
}
_NAMED = {
    "npy-not-an-archive": "single-npy",
    "attention-too-many-steps": "too-many-steps",
    "weights-compresses-too-well": "bomb",
    "archive-empty-zip": "no-weights",
    "archive-only-other-members": "no-weights",
    "archive-weights-without-npy-suffix": "no-weights",
    "archive-both-layouts": "both",
    "archive-duplicate-member": "duplicate",
    "archive-encrypted-flag": "encrypted",
    "archive-bzip2": "method",
    "archive-lzma": "method",
    "archive-unknown-method": "method",
    "archive-65-members": "members",
    "archive-bad-crc": "damaged",
    "archive-corrupt-deflate": "damaged",
    "archive-not-npy-member": "npy-magic",
    "npy-bad-magic": "npy-magic",
    "npy-version-9": "npy-version",
    "npy-v2-header-2GB": "header-length",
    "npy-v1-header-64KB": "header-length",
    "npy-header-not-dict": "header-keys",
    "npy-header-missing-keys": "header-keys",
    "npy-header-extra-key": "header-keys",
    "npy-header-fortran-not-bool": "header-fortran",
    "npy-header-unparsable": "header-syntax",
    "npy-header-deep-parens": "header-syntax",
    "npy-header-long-int": "header-syntax",
    "npy-v3-header-not-utf8": "header-syntax",
    "meta-nested-100000": "string-length",  # 200000 characters: refused from the header
    "meta-nested-30000": "meta-depth",
    "meta-nested-33": "meta-depth",
    "meta-not-json": "meta-json",
    "meta-not-an-object": "meta-object",
    "meta-long-int": "meta-int",
    "meta-lone-surrogate": "meta-surrogate",
    "meta-surrogate-key": "meta-surrogate",
    "meta-too-long": "string-length",
    "weights-not-triangular": "not-triangular",
    "weights-one-step": "one-step",
    "attention-not-square": "attention-shape",
    "format-other": "format",
    "tokens-too-few": "tokens-count",
    "tokens-2-d": "tokens-shape",
    "tokens-too-long": "string-length",
    "name-too-long": "string-length",
    "name-1-d": "string-shape",
    "tokens-shape-lie-with-matching-data": "tokens-count",
    "weights-shape-lie-with-matching-data": "not-triangular",
}


def expected_check(case: str) -> str:
    """The check that must refuse ``case``: the first one its defect meets, in the loader's order
    (archive, then each member's header and sizes, then the header's contents, then data)."""
    if case in _NAMED:
        return _NAMED[case]
    if case.startswith("archive-truncated-"):
        return "magic" if int(case.rsplit("-", 1)[1]) < 2 else "zip"  # "PK" is 2 bytes
    key, kind = case.split("-", 1)
    if kind.startswith("truncated-"):
        # Short of the header: the header read ends early. Past it: the sizes disagree.
        hl = header_len(base(layout_for(key))[key])
        return "truncated" if int(kind.split("-")[1]) < hl else "size-fewer"
    if kind in ("shape-huge", "shape-enormous", "shape-bigger", "bomb-honest-sizes"):
        return "size-fewer" if kind.startswith("shape") else "size-more"
    if kind in ("shape-smaller", "shape-0-d"):
        return "size-more"
    if kind in ("shape-negative", "shape-not-ints"):
        return "header-shape"
    if kind == "shape-ndim":
        return _STRING_SHAPE[key]
    if kind == "bomb-lying-sizes":
        return "damaged"  # the sizes look honest: the CRC of what inflates is wrong
    if kind == "declared-zeros":
        return "row-sum" if key in ("weights", "attention") else "string-length"
    if kind.startswith("dtype-"):
        # A dtype a trace may hold (float16/32/64, str, bytes) in the wrong member is refused
        # for its shape and kind; any other dtype for itself.
        if kind[6:] not in ("<f4", "<f8", "<U3", "|S3"):
            return "dtype"
        return "string-shape" if key == "tokens" else _STRING_SHAPE[key]
    if kind in ("structured", "pickled"):
        return kind
    if kind.startswith("codepoint-"):
        return "codepoint"
    if kind == "bytes-not-utf8":
        return "utf8"
    if kind.endswith(("-nan", "-inf")):
        return "non-finite"
    if kind.endswith("-negative"):
        return "negative"
    if kind.endswith(("-big", "-zero-row")):
        return "row-sum"
    raise AssertionError(f"no expected check for {case}")
