"""A scored policy's rule, written once and compiled as written.

A :class:`~h2o.policies.base.ScoredPolicy` says how one step's attention changes its scores in one
place: a plain static function ``rule(score, attn, n)`` in numba's subset of numpy, the card's
loop as the card writes it (H2O: ``score[i] += attn[i]`` for ``i`` below ``n``). Every path runs
that function, compiled once by numba from its source (:func:`compile_rule`, ``njit`` with the
disk cache, for float32 and for float64 weights):

* an instance calls the compiled function at each step (from Python: a fraction of a
  microsecond, less than one numpy call);
* the compiled loops (:mod:`h2o.bank.kernels`, :mod:`h2o.bank.lane`) call the same machine code
  through its address (:func:`call_rule`), an integer argument.

Why an address and not the function: numba types a function passed to a loop by the function
object (a loop cached with it is never found again by another process, so it would compile anew
at every start) or, as a first-class function, looks its address up in Python at every call of
the loop (microseconds a step of a bank). An integer costs nothing to pass, the loops are compiled
once for every rule and stay cached, and a rule edited in its file is recompiled alone (its cache
is keyed on its own file), never served stale.

A rule numba cannot compile (one written with numpy calls numba lacks) gives None: the class then
runs the plain stepwise path, its function called from Python as written.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

#: The two forms a rule is compiled for: float64 scores, float32 or float64 weights (a trace's
#: weights are float32; a caller's may be float64), contiguous, and the count kept.
RULE_F32 = types.void(types.float64[::1], types.float32[::1], types.intp)
RULE_F64 = types.void(types.float64[::1], types.float64[::1], types.intp)
_RULE_BY_DTYPE = {types.float32: RULE_F32, types.float64: RULE_F64}


@dataclass(frozen=True, eq=False)
class CompiledRule:
    """A rule compiled by numba: ``jit`` for an instance; ``f32``/``f64``, the addresses of the
    same compiled code for float32/float64 weights, for the loops (:func:`call_rule`). Holding
    ``jit`` keeps that code alive."""

    python: Callable[[np.ndarray, np.ndarray, int], None]
    jit: Callable[[np.ndarray, np.ndarray, int], None]
    f32: int
    f64: int

    def for_weights(self, dtype: np.dtype) -> int:
        """The loops' form for weights of ``dtype`` (float32, else float64)."""
        return self.f32 if dtype == np.float32 else self.f64

    # One per rule function: a copy of an engine that holds it (a deep-copied bank) shares it,
    # and a pickle names the function and compiles it (or loads it from the cache) again.
    def __deepcopy__(self, memo: dict) -> CompiledRule:
        return self

    def __copy__(self) -> CompiledRule:
        return self

    def __reduce__(self) -> tuple:
        return compile_rule, (self.python,)


def _cached(compile_with: Callable[..., Callable], fn: Callable) -> Callable:
    """``compile_with(cache=True)(fn)``, or compiled afresh without numba's disk cache when the
    cache cannot serve it: a function with no file to key it on (defined in a notebook cell or
    by ``exec``), or one whose module numba cannot import again to load its cached code (a file
    loaded by path and not kept in ``sys.modules``)."""
    try:
        return compile_with(cache=True)(fn)
    except Exception:  # compiled without the cache below: a rule that does not compile fails there
        return compile_with(cache=False)(fn)


def _address(jit: object, sig: types.Signature) -> int:
    """Where numba put ``jit``'s code for ``sig`` (its own calling convention)."""
    cres = jit.overloads[sig.args]  # type: ignore[attr-defined]
    return int(cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name))


@functools.cache
def compile_rule(fn: Callable) -> CompiledRule | None:
    """``fn`` (a rule) compiled for both weight types, once per function (a rule replaced on its
    class is another function, compiled anew), or None if numba cannot compile it."""
    try:
        jit = _cached(lambda **kw: njit([RULE_F32, RULE_F64], nogil=True, **kw), fn)
    except Exception:  # numba's typing or lowering refused it: the rule runs in Python
        return None
    return CompiledRule(fn, jit, _address(jit, RULE_F32), _address(jit, RULE_F64))


@intrinsic
def call_rule(typingctx, rule, score, attn, n):
    """``rule(score, attn, n)`` inside a compiled loop, ``rule`` the address of a compiled rule
    for ``attn``'s type (:attr:`CompiledRule.f32` for float32 weights, ``f64`` for float64):
    ``score`` float64 and ``attn`` contiguous 1-D arrays. An indirect call, a few nanoseconds."""
    rule_sig = _RULE_BY_DTYPE.get(getattr(attn, "dtype", None))
    if (
        not isinstance(rule, types.Integer)
        or rule_sig is None
        or not all(
            isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" for a in (score, attn)
        )
        or score.dtype != types.float64
        or not score.mutable
    ):
        raise TypingError(f"call_rule takes an address and {RULE_F32} or {RULE_F64}")
    # A read-only weights array has the same layout in memory: passed as the rule's type.
    args = rule_sig.args

    def codegen(context, builder, signature, llargs):
        address, s, w, k = llargs
        k = context.cast(builder, k, signature.args[3], types.intp)
        fnty = context.call_conv.get_function_type(types.void, args)
        fptr = builder.inttoptr(address, fnty.as_pointer())
        status, _ = context.call_conv.call_function(builder, fptr, types.void, args, (s, w, k))
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return context.get_dummy_value()

    return types.void(rule, score, attn, n), codegen


def _no_score(score, attn, n):
    """The rule of a policy that keeps no score (a ring): passed where a loop takes a rule, and
    never called."""


def no_score() -> CompiledRule:
    """:func:`_no_score` compiled (once)."""
    compiled = compile_rule(_no_score)
    assert compiled is not None  # an empty function compiles
    return compiled
