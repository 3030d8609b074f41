"""The app's byte-bounded cache: bounded by bytes, least recently used out first, one
computation per key however many sessions ask at once."""

from __future__ import annotations

import threading
import time

from app.bytecache import ByteCache, Holds


def test_it_keeps_at_most_its_bytes_and_drops_the_least_recently_used():
    cache = ByteCache(100, nbytes=len)
    for key in "abcd":
        cache.get(key, lambda k=key: k * 30)
    assert cache.total == 90 and len(cache) == 3  # "a" went when "d" came
    cache.get("b", lambda: "never")  # a hit: "b" is now the most recent
    cache.get("e", lambda: "e" * 30)
    made = []
    assert cache.get("b", lambda: made.append("b") or "b2") == "b" * 30 and not made
    assert cache.get("c", lambda: "c2") == "c2"  # "c" was the least recently used: recomputed


def test_a_value_above_the_cap_is_still_returned_and_kept_alone():
    cache = ByteCache(10, nbytes=len)
    cache.get("small", lambda: "x")
    assert cache.get("big", lambda: "y" * 50) == "y" * 50
    assert len(cache) == 1 and cache.total == 50


def test_concurrent_requests_compute_once():
    cache = ByteCache(1000, nbytes=len)
    calls = []

    def slow() -> str:
        calls.append(1)
        time.sleep(0.2)
        return "v"

    threads = [threading.Thread(target=cache.get, args=("k", slow)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1


def test_discard_drops_the_chosen_keys_and_their_bytes():
    cache = ByteCache(1000, nbytes=len)
    for key in [("d1", 1), ("d1", 2), ("d2", 1)]:
        cache.get(key, lambda k=key: "x" * (10 * k[1]))
    assert cache.total == 40
    assert cache.discard(lambda k: k[0] == "d1") == 30
    assert cache.total == 10 and len(cache) == 1
    assert cache.get(("d2", 1), lambda: "recomputed") == "x" * 10  # the other key stayed


def test_the_last_holder_letting_go_frees_the_key_and_only_it():
    cache = ByteCache(1000, nbytes=len)
    holds = Holds(lambda d: cache.discard(lambda k: k[0] == d))
    for key in [("a", 1), ("a", 2), ("b", 1)]:
        cache.get(key, lambda k=key: "x" * (10 * k[1]))
    s1, s2 = object(), object()
    holds.hold(s1, ["a", "b"])
    holds.hold(s2, ["a"])
    holds.hold(s2, ["a"])  # again (every rerun does it): still one hold per session
    assert holds.holders("a") == 2 and holds.holders("b") == 1

    holds.release(s2)  # one of two sessions holding "a" ended: everything stays
    assert holds.holders("a") == 1 and len(cache) == 3 and cache.total == 40

    holds.hold(s1, ["b"])  # s1 replaced "a" by "b": the last holder of "a" let go
    assert holds.holders("a") == 0
    assert len(cache) == 1 and cache.total == 10  # both values of "a", 30 bytes, are gone
    assert cache.get(("b", 1), lambda: "recomputed") == "x" * 10

    holds.release(s1)
    assert holds.holders("b") == 0 and len(cache) == 0 and cache.total == 0
    holds.release(s1)  # ending twice does nothing
    assert holds.holders("b") == 0
