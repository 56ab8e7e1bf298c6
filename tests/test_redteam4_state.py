"""Red team 4: state a candidate keeps across calls in its module's globals (a01, a02, a12, a13's
counter, a15 in /work/redteam4), and the checker that closes the class (`guards.state`).

The judge runs are scan-off and smoke-only: the run-time fingerprint is the defence (the scan is
a convenience), and every such counter shows at the first smoke call or its ghost replay (a
pointer-keyed one at the first timed batch). The checker's rule (growth after a call with a new
signature only) is unit-tested on modules made from source, which is fast.
"""

from __future__ import annotations

import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
from conftest import DEVICE

from autokernel.harness import runner
from autokernel.harness.guards import state as state_module
from autokernel.harness.guards.state import CallableState, call_signature
from autokernel.harness.result import Status
from autokernel.harness.static_scan import scan_source

RED_TEAM = Path(__file__).parent / "adversarial" / "judge"
ON_CPU = DEVICE == "cpu"


# -- the judge: every attack REJECTED (call-time-state) with the scan off -------------------------

ATTACKS = [
    ("rt4_counter_partial_next.py", "smoke", "_tick[0] changed"),
    ("rt4_counter_operator_setitem.py", "smoke", "_SEEN[((4, 37), ...)] changed at a call with "
     "a signature already seen"),
    ("rt4_counter_deep_default.py", "smoke", "kernel_fn defaults changed"),
    ("rt4_counter_param_mutation.py", "smoke", "_CALLS changed"),
    ("rt4_timed_fraction.py", "smoke", "_S[last] changed"),
    ("rt4_counter_jit_attribute.py", "smoke", "softmax_rows[hidden_calls] changed"),
    ("rt4_counter_generator_namespace.py", "smoke", "_TICKS changed"),
    # The same tensors at the ghost replay: only a timed batch's fresh inputs show it.
    ("rt4_counter_pointer_set.py", "timing", "_SEEN changed at a call with a signature already"),
]


@pytest.mark.skipif(not ON_CPU, reason="the stages named are the interpreter's plan")
@pytest.mark.parametrize("name,stage,text", ATTACKS, ids=[a[0][4:-3] for a in ATTACKS])
def test_module_state_counters_are_rejected(name: str, stage: str, text: str,
                                            tmp_path: Path) -> None:
    result = runner.run_bench(RED_TEAM / name, device=DEVICE, quick=True, static_scan=False,
                              cache_dir=tmp_path / "cache", only_stages=["smoke"])
    assert result.status is Status.REJECTED, result.reason
    assert result.rule == "call-time-state", result.reason
    assert result.stage == stage, result.reason
    assert text in result.reason.replace("\\[", "["), result.reason


# -- the checker, on modules made from source ------------------------------------------------------

def module(source: str, name: str = "rt4_state_candidate") -> types.ModuleType:
    made = types.ModuleType(name)
    made.__file__ = f"/tmp/{name}.py"
    source = textwrap.dedent(source)
    # Triton's compiled (not interpreted) @jit reads its function's source from the file
    Path(made.__file__).write_text(source)
    sys.modules[name] = made
    exec(compile(source, made.__file__, "exec"), vars(made))
    return made


X = torch.zeros(4, 8)
Y = torch.zeros(4, 8)  # the same signature as X, another tensor
Z = torch.zeros(3, 16)  # a new signature


def run(made: types.ModuleType, calls: list[torch.Tensor]) -> list[list[str]]:
    checker = CallableState.take(made)
    found = []
    for x in calls:
        made.kernel_fn(x)
        found.append(checker.changes([(x,)]))
    return found


COUNTERS = {
    "global int": """
        N = 0
        def kernel_fn(x):
            globals()["N"] = N + 1
    """,
    "operator.setitem": """
        import operator
        SEEN = {}
        def kernel_fn(x):
            key = tuple(x.shape)
            operator.setitem(SEEN, key, SEEN.get(key, 0) + 1)
    """,
    "partial(next, count())": """
        import functools, itertools
        tick = functools.partial(next, itertools.count())
        def kernel_fn(x):
            tick()
    """,
    "parameter alias": """
        CALLS = []
        def bump(box):
            box.append(1)
        def kernel_fn(x):
            bump(CALLS)
    """,
    "deep default": """
        def kernel_fn(x, _c=(((((((((((([0],),),),),),),),),),),),)):
            box = _c
            while isinstance(box, tuple):
                box = box[0]
            box[0] += 1
    """,
    "bound method": """
        push = [].append
        def kernel_fn(x):
            push(1)
    """,
    "generator": """
        def count():
            n = 0
            while True:
                yield n
                n += 1
        ticks = count()
        def kernel_fn(x):
            next(ticks)
    """,
    "class attribute": """
        class Box:
            n = 0
        def kernel_fn(x):
            Box.n += 1
    """,
    "slots": """
        class Box:
            __slots__ = ("n",)
            def __init__(self):
                self.n = 0
        BOX = Box()
        def kernel_fn(x):
            BOX.n += 1
    """,
    "function attribute": """
        def kernel_fn(x):
            kernel_fn.calls = getattr(kernel_fn, "calls", 0) + 1
    """,
    "dict subclass hiding its items": """
        class Quiet(dict):
            def items(self):
                return iter(())
            def __iter__(self):
                return iter(())
        STATE = Quiet(n=0)
        def kernel_fn(x):
            STATE["n"] += 1
    """,
    "class claiming to be Triton's": """
        class Cache:
            __module__ = "triton.runtime.jit"
            def __init__(self):
                self.n = 0
        C = Cache()
        def kernel_fn(x):
            C.n += 1
    """,
    "array": """
        import array
        A = array.array("i", [0])
        def kernel_fn(x):
            A[0] += 1
    """,
    "random.Random": """
        import random
        R = random.Random(0)
        def kernel_fn(x):
            R.random()
    """,
    "ContextVar": """
        import contextvars
        V = contextvars.ContextVar("v", default=0)
        def kernel_fn(x):
            V.set(V.get() + 1)
    """,
    "SimpleNamespace": """
        import types
        S = types.SimpleNamespace(n=0)
        def kernel_fn(x):
            S.n += 1
    """,
    "fabricated module": """
        import types
        M = types.ModuleType("m")
        M.n = 0
        def kernel_fn(x):
            M.n += 1
    """,
    "tensor attribute": """
        import torch
        T = torch.zeros(1)
        T.box = [0]
        def kernel_fn(x):
            T.box[0] += 1
    """,
    "a cached helper's result": """
        import functools
        @functools.cache
        def tally(shape):
            return [0]
        def kernel_fn(x):
            tally(tuple(x.shape))[0] += 1
    """,
    "a bounded cached helper's result": """
        import functools
        @functools.lru_cache(maxsize=8)
        def tally(shape):
            return {"n": 0}
        def kernel_fn(x):
            tally(tuple(x.shape))["n"] += 1
    """,
    "partial subclass": """
        import functools, itertools
        class Tick(functools.partial):
            pass
        tick = Tick(next, itertools.count())
        def kernel_fn(x):
            tick()
    """,
    "deque subclass": """
        import collections
        class Ring(collections.deque):
            def __iter__(self):
                return iter(())
        RING = Ring()
        def kernel_fn(x):
            RING.append(1)
    """,
    "count subclass": """
        import itertools
        class Counter(itertools.count):
            pass
        C = Counter()
        def kernel_fn(x):
            next(C)
    """,
    "object hiding its __dict__ and __class__": """
        class Box:
            @property
            def __dict__(self):
                return {}
            @property
            def __class__(self):
                return int
        BOX = Box()
        def kernel_fn(x):
            object.__setattr__(BOX, "n", object.__getattribute__(BOX, "__getattribute__") and 1)
            BOX.calls = getattr(BOX, "calls", 0) + 1
    """,
    "list iterator": """
        IT = iter(range(10**6))
        def kernel_fn(x):
            next(IT)
    """,
}


@pytest.mark.parametrize("source", list(COUNTERS.values()), ids=list(COUNTERS))
def test_a_counter_in_module_state_is_seen_at_repeated_calls(source: str) -> None:
    found = run(module(source), [X, X, Y])
    assert all(f and f[0].endswith("[call-time-state]") for f in found[1:]), found


HONEST = {
    "config dict keyed by shape": """
        CONFIGS = {}
        def kernel_fn(x):
            key = tuple(x.shape)
            if key not in CONFIGS:
                CONFIGS[key] = (64, 4)
            return CONFIGS[key]
    """,
    "nested config dicts": """
        CONFIGS = {}
        def kernel_fn(x):
            CONFIGS.setdefault(str(x.dtype), {}).setdefault(tuple(x.shape), 4)
    """,
    "lru_cache'd plan": """
        import functools
        @functools.lru_cache(maxsize=1024)
        def plan(rows, cols):
            return rows * cols
        def kernel_fn(x):
            return plan(*x.shape)
    """,
    "lazy initialisation": """
        PLAN = None
        def kernel_fn(x):
            global PLAN
            if PLAN is None:
                PLAN = {"block": 64}
    """,
    "bounded lru_cache, evicting and reordering": """
        import functools
        @functools.lru_cache(maxsize=1)
        def plan(shape):
            return {"block": shape[-1]}
        @functools.lru_cache(maxsize=4)
        def other(shape):
            return (shape, 4)
        def kernel_fn(x):
            plan(tuple(x.shape))
            other(tuple(x.shape))
            other((1,))
    """,
    "config cache holding an inference tensor (no version counter)": """
        import torch
        TABLES = {}
        def kernel_fn(x):
            with torch.inference_mode():
                TABLES.setdefault(tuple(x.shape), torch.zeros(2))
    """,
    "warmed-up set": """
        WARMED = set()
        def kernel_fn(x):
            WARMED.add(tuple(x.shape))
    """,
    "constant closure and default": """
        def make(block):
            def kernel(x, scale=1.0):
                return block * scale
            return kernel
        kernel_fn = make(64)
    """,
}


@pytest.mark.parametrize("source", list(HONEST.values()), ids=list(HONEST))
def test_a_cache_filled_once_per_signature_is_not_state(source: str) -> None:
    assert run(module(source), [X, X, Y, Z, Z, X, Y]) == [[]] * 7


def test_a_cache_keyed_by_pointer_shows_at_a_repeated_signature() -> None:
    made = module("""
        import functools
        @functools.lru_cache(maxsize=None)
        def seen(pointer):
            return pointer
        def kernel_fn(x):
            seen(x.data_ptr())
    """)
    found = run(made, [X, X, Y])
    assert found[:2] == [[], []]
    assert "plan" not in found[2][0] and "seen changed at a call with a signature already seen" \
        in found[2][0], found


def test_a_value_rewritten_at_a_new_signature_is_state() -> None:
    made = module("""
        LAST = {"shape": None}
        def kernel_fn(x):
            LAST["shape"] = tuple(x.shape)
    """)
    found = run(made, [X, Z])
    assert found[0] == [] and "LAST[shape][0] changed at a call" in found[1][0], found


def test_state_too_large_to_check_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_module, "MAX_NODES", 50)
    made = module("""
        TABLE = [[i] for i in range(100)]
        def kernel_fn(x):
            pass
    """)
    found = run(made, [X])
    assert found[0] and "too large to check" in found[0][0], found


def test_no_depth_cap() -> None:
    made = module("""
        BOX = [0]
        for _ in range(150):
            BOX = [BOX]
        def kernel_fn(x):
            inner = BOX
            while len(inner) == 1 and isinstance(inner[0], list):
                inner = inner[0]
            inner[0] += 1
    """)
    found = run(made, [X, X])
    assert all(f for f in found), found


def test_triton_objects_are_not_looked_into_but_what_is_hung_on_them_is() -> None:
    import triton

    made = module("""
        import triton
        import triton.language as tl
        @triton.jit
        def k(x_ptr):
            pass
        def kernel_fn(x):
            k.cache_like_attribute_triton_never_names = getattr(
                k, "cache_like_attribute_triton_never_names", 0) + 1
    """)
    assert isinstance(made.k, triton.runtime.KernelInterface)
    found = run(made, [X, X])
    assert found[1] and "cache_like_attribute_triton_never_names" in found[1][0], found


def test_the_signature_holds_layout_and_alignment_not_values() -> None:
    base = torch.zeros(40)
    a, b = base[:32].view(4, 8), base[1:33].view(4, 8)
    assert call_signature((a,)) != call_signature((b,))
    assert call_signature((a,)) == call_signature((torch.ones(4, 8),))
    assert call_signature((a, 3)) != call_signature((a, 4))


# -- the scan: the cheap static cases ------------------------------------------------------------

@pytest.mark.parametrize("name,text", [
    ("rt4_counter_partial_next.py", "next"),
    ("rt4_counter_operator_setitem.py", "operator.setitem"),
    ("rt4_counter_param_mutation.py", "_CALLS"),
])
def test_the_scan_sees_the_simple_forms(name: str, text: str) -> None:
    found = scan_source((RED_TEAM / name).read_text())
    assert any(v.rule == "call-time-state" and text in v.message for v in found), found
