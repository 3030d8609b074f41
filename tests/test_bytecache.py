"""The app's byte-bounded cache: bounded by bytes, least recently used out first, one
computation per key however many sessions ask at once."""

from __future__ import annotations

import threading
import time

from app.bytecache import ByteCache


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
