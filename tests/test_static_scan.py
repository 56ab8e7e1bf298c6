"""The harness's AST scan: each rule fires on the pattern it exists for, and never on honest code."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from autokernel.harness.static_scan import RULES, scan_source, summarize
from autokernel.kernels import KERNELS_DIR
from autokernel.ops import KERNEL_TYPES

ADVERSARIAL_DIR = Path(__file__).parent / "adversarial"

HEADER = """\
import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"
"""


def scan(body: str) -> list[tuple[str, int]]:
    source = HEADER + textwrap.dedent(body)
    return [(v.rule, v.line) for v in scan_source(source)]


def rules(body: str) -> set[str]:
    return {rule for rule, _ in scan(body)}


@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_shipped_starters_pass_the_scan(kernel_type: str) -> None:
    source = (KERNELS_DIR / f"{kernel_type}.py").read_text()
    assert scan_source(source) == []


@pytest.mark.parametrize("name", ["honest_softmax.py", "honest_rmsnorm_round_to_zero.py",
                                  "fallback_torch.py"])
def test_files_the_scan_cannot_judge_pass_it(name: str) -> None:
    # Honest files, and cheats only the dynamic detectors can see (tested in test_harness.py).
    assert scan_source((ADVERSARIAL_DIR / name).read_text()) == []


@pytest.mark.parametrize("module", ["os", "sys", "subprocess", "socket", "ctypes", "threading",
                                    "multiprocessing", "concurrent.futures", "importlib",
                                    "builtins", "inspect", "gc", "io", "pathlib", "shutil",
                                    "signal", "time", "pickle", "marshal", "urllib.request",
                                    "http.client", "requests", "asyncio", "weakref"])
def test_refused_imports(module: str) -> None:
    assert rules(f"import {module}\n") == {"import-not-allowed"}
    assert "import-not-allowed" in rules(f"from {module} import something\n")


@pytest.mark.parametrize("module", ["math", "functools", "typing", "dataclasses", "itertools",
                                    "operator", "enum", "collections.abc", "numpy", "torch",
                                    "torch.nn.functional", "triton.language", "triton.testing",
                                    "__future__"])
def test_allowed_imports(module: str) -> None:
    assert rules(f"import {module}\n") == set()


@pytest.mark.parametrize("module", ["torch.utils.cpp_extension", "torch.hub",
                                    "torch.multiprocessing", "torch._C", "numpy.ctypeslib"])
def test_dangerous_submodules_of_allowed_roots(module: str) -> None:
    assert rules(f"import {module}\n") == {"import-not-allowed"}


@pytest.mark.parametrize("call", ["open('x.txt', 'w')", "exec('1')", "eval('1')",
                                  "compile('1', 'f', 'exec')", "__import__('os')", "globals()",
                                  "vars(torch)", "setattr(torch, 'softmax', None)",
                                  "delattr(torch, 'softmax')", "id(torch)", "breakpoint()"])
def test_forbidden_builtins(call: str) -> None:
    assert "forbidden-builtin" in rules(f"def kernel_fn(x):\n    {call}\n    return x\n")


def test_getattr_only_with_a_literal_public_name() -> None:
    assert rules("def kernel_fn(x):\n    return getattr(tl, 'float16')\n") == set()
    assert "dynamic-attribute" in rules("def kernel_fn(x, n):\n    return getattr(torch, n)\n")
    assert "private-attribute" in rules("def kernel_fn(x):\n    return getattr(torch, '_C')\n")
    assert "dynamic-attribute" in rules("g = getattr\n")
    assert "dynamic-attribute" in rules("from operator import attrgetter\n")


def test_environment_access() -> None:
    assert "environment-access" in rules("def kernel_fn(x):\n    torch.os.environ['A'] = '1'\n")
    assert "module-escape" in rules("def kernel_fn(x):\n    return torch.os\n")
    found = rules("import os\nKEY = os.environ.get('ANTHROPIC_API_KEY')\n")
    assert {"import-not-allowed", "environment-access"} <= found
    assert "environment-access" in rules("import os\nKEY = os.getenv('ANTHROPIC_API_KEY')\n")


def test_file_access_through_allowed_modules() -> None:
    assert "file-access" in rules("def kernel_fn(x):\n    torch.save(x, 'x.pt')\n")
    assert "file-access" in rules("import numpy as np\nA = np.load('a.npy')\n")
    assert "file-access" in rules("def kernel_fn(x):\n    x.numpy().tofile('a')\n")
    assert rules("from torch.utils.cpp_extension import load_inline\n") == {"import-not-allowed"}
    assert "file-access" in rules("def kernel_fn(x):\n    torch.utils.cpp_extension.load_inline()\n")
    # tl.load is a Triton memory load, not a file read.
    assert rules("@triton.jit\ndef k(p):\n    tl.load(p)\n") == set()


@pytest.mark.parametrize("statement", [
    "torch.softmax = lambda x, dim: x",
    "triton.testing.do_bench = lambda fn: 0.0",
    "torch.cuda.Event.elapsed_time = lambda a, b: 0.0",
    "torch.nn.functional.softmax = None",
    "del torch.softmax",
    "torch.backends.cuda.matmul.allow_tf32 = True",
])
def test_monkeypatching_imported_modules(statement: str) -> None:
    assert "monkeypatch" in rules(statement + "\n")
    assert "monkeypatch" in rules(f"def kernel_fn(x):\n    {statement}\n    return x\n")


def test_monkeypatching_a_from_imported_member() -> None:
    assert "monkeypatch" in rules("from torch import Tensor\nTensor.add = None\n")


def test_rebinding_own_names_is_not_monkeypatching() -> None:
    assert rules("softmax = torch.softmax\nBLOCK = 128\n") == set()


def test_side_streams() -> None:
    assert "side-stream" in rules("def kernel_fn(x):\n    s = torch.cuda.Stream()\n")
    assert "side-stream" in rules(
        "def kernel_fn(x):\n    with torch.cuda.stream(None):\n        return x\n")
    assert "side-stream" in rules("def kernel_fn(x):\n    torch.cuda.set_stream(None)\n")


def test_threads_and_processes() -> None:
    assert "import-not-allowed" in rules("import threading\n")
    assert "thread" in rules("def kernel_fn(x, pool):\n    pool.ThreadPoolExecutor()\n")


def test_tensor_subclasses() -> None:
    assert "tensor-subclass" in rules("class Lazy(torch.Tensor):\n    pass\n")
    assert "tensor-subclass" in rules("def kernel_fn(x):\n    return x.as_subclass(object)\n")
    assert "tensor-subclass" in rules(
        "def kernel_fn(x):\n    return torch.Tensor._make_subclass(object, x)\n")
    assert "tensor-subclass" in rules(
        "class Mode:\n    def __torch_function__(self):\n        pass\n"
        "def kernel_fn(x):\n    return x.__torch_function__\n")


def test_private_and_dunder_attributes() -> None:
    assert "private-attribute" in rules("def kernel_fn(x):\n    return x._version\n")
    assert "private-attribute" in rules("def kernel_fn(x):\n    return torch._C\n")
    assert "private-attribute" in rules("def kernel_fn(x):\n    return kernel_fn.__globals__\n")
    assert "private-attribute" in rules("def kernel_fn(x):\n    return __builtins__\n")
    assert rules("class Launcher:\n    def __init__(self):\n        self._grid = 1\n") == set()
    assert rules("def kernel_fn(x):\n    return x\nNAME = kernel_fn.__name__\n") == set()


@pytest.mark.parametrize("body", [
    # A dict keyed on the input's pointer, written at call time.
    "_CACHE = {}\ndef kernel_fn(x):\n    _CACHE[x.data_ptr()] = x\n    return x\n",
    # The same through a mutating method.
    "_CACHE = {}\ndef kernel_fn(x):\n    _CACHE.setdefault(tuple(x.shape), x)\n    return x\n",
    # A mutable default argument.
    "def kernel_fn(x, _cache={}):\n    _cache[x.shape] = x\n    return x\n",
    # Global rebinding.
    "LAST = None\ndef kernel_fn(x):\n    global LAST\n    LAST = x\n    return x\n",
    # An attribute of a module-level object.
    "class State:\n    last = None\nSTATE = State()\ndef kernel_fn(x):\n"
    "    STATE.last = x\n    return x\n",
    # lru_cache on the entry point: hashes tensors by identity.
    "import functools\n@functools.lru_cache\ndef kernel_fn(x):\n    return x\n",
])
def test_call_time_state_is_flagged_as_caching(body: str) -> None:
    assert "call-time-state" in rules(body)


def test_local_state_is_fine() -> None:
    body = ("def kernel_fn(x):\n    sizes = {}\n    sizes['n'] = x.shape[-1]\n"
            "    out = torch.empty_like(x)\n    out_list = [out]\n    out_list.append(out)\n"
            "    return out\n")
    assert rules(body) == set()


def test_torch_compile_is_a_library_fallback() -> None:
    assert "library-fallback" in rules("def kernel_fn(x):\n    return torch.compile(f)(x)\n")


def test_violations_name_rule_and_line() -> None:
    found = scan("\nimport os\n")
    assert found == [("import-not-allowed", HEADER.count("\n") + 2)]
    violations = scan_source(HEADER + "import os\nimport socket\nimport ctypes\nimport sys\n")
    text = summarize(violations, limit=2)
    assert "[import-not-allowed]" in text and "and 2 more" in text
    assert all(v.rule in RULES for v in violations)


def test_syntax_errors_are_reported_not_raised() -> None:
    assert [v.rule for v in scan_source("def broken(:\n")] == ["syntax"]


# -- the second red team's classes (issue 12) ------------------------------------------------------

# The first rule each adversarial file breaks (its other rules may follow on later lines).
ADVERSARIAL_FIRST_RULES = {
    "host_numpy_inplace.py": "host-readout",
    "host_numpy_flag.py": "host-readout",
    "host_tolist_rmsnorm.py": "host-readout",
    "host_array_interface.py": "host-readout",
    "host_raw_flag_ghost_exception.py": "host-readout",
    "token_launch_host_answer.py": "host-readout",
    "custom_op_softmax.py": "op-registration",
    "aten_kernel_override.py": "op-registration",
    "aten_new_overload.py": "op-registration",
    "pre_run_hook_exp.py": "launch-hook",
    "pre_run_hook_list_rmsnorm.py": "launch-hook",
    "frame_walk_tolerance.py": "introspection",
    "frame_walk_globals.py": "introspection",
    "interpreter_inspect_reference.py": "undefined-name",
    "escape_collect_env.py": "module-escape",
    "escape_fromregex_parent_env.py": "file-access",
    "escape_open_memmap.py": "file-access",
    "host_ctypeslib_raw_memory.py": "module-escape",
    "orphan_forged_verdict.py": "module-escape",
    "orphan_same_group.py": "module-escape",
    "timed_probe_torch_fallback.py": "host-readout",
    "timed_probe_inplace_output.py": "host-readout",
    "output_pool_rotation.py": "call-time-state",
    "cache_in_lru_holder.py": "call-time-state",
    "drift_in_lru_holder.py": "call-time-state",
    "honest_config_cache.py": "call-time-state",
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL_FIRST_RULES))
def test_adversarial_files_break_their_rule(name: str) -> None:
    violations = scan_source((ADVERSARIAL_DIR / name).read_text())
    assert violations, "the scan passed a file it must refuse"
    assert violations[0].rule == ADVERSARIAL_FIRST_RULES[name], summarize(violations)
    assert all(v.rule in RULES for v in violations)


@pytest.mark.parametrize("name", ["honest_lru_config.py", "degenerate_shortcut.py",
                                  "ignores_strides.py", "drops_wide_columns.py"])
def test_kernels_only_the_harness_can_judge_pass_the_scan(name: str) -> None:
    # An honest config cache, and faults (not cheats) the scan has no business guessing at.
    assert scan_source((ADVERSARIAL_DIR / name).read_text()) == []


@pytest.mark.parametrize("body", [
    "def kernel_fn(x):\n    return x.numpy()\n",
    "def kernel_fn(x):\n    return x.tolist()\n",
    "def kernel_fn(x):\n    return x[0].item()\n",
    "def kernel_fn(x):\n    return getattr(x, 'numpy')()\n",
    "def kernel_fn(x):\n    return x.untyped_storage()\n",
    "import numpy as np\ndef kernel_fn(x):\n    return np.from_dlpack(x)\n",
    "def kernel_fn(x):\n    return torch.utils.dlpack.to_dlpack(x)\n",
    "from torch.utils.dlpack import to_dlpack\n",
    "from torch.utils import dlpack\n",
    "import numpy as np\ndef kernel_fn(x):\n    return torch.from_numpy(np.ones(3))\n",
    # numpy views of raw memory: the array protocols, defined any way a class can define them
    "class Raw:\n    @property\n    def __array_interface__(self):\n        return {}\n",
    "class Raw:\n    __array_interface__ = {}\n",
    "class Raw:\n    def __dlpack__(self):\n        return None\n",
    "Raw = type('Raw', (), {'__array_interface__': {}})\n",
    "import numpy as np\ndef kernel_fn(x):\n    return np.ctypeslib.as_array(x)\n",
])
def test_host_reads_of_tensor_values(body: str) -> None:
    assert "host-readout" in rules(body)


@pytest.mark.parametrize("body", [
    "@torch.library.custom_op('mine::clone', mutates_args=())\ndef f(x):\n    return x\n",
    "from torch.library import custom_op\n",
    "from torch import library\n",
    "import torch.library as registry\n",
    "LIB = torch.library.Library('aten', 'IMPL')\n",
    "T = torch\nLIB = T.library\n",
    "LIB = getattr(torch, 'library')\n",
    "def kernel_fn(x):\n    return torch.ops.aten.clone.default.py_impl(None)\n",
    "@torch.library.triton_op('mine::op', mutates_args=())\ndef f(x):\n    return x\n",
])
def test_operator_registration(body: str) -> None:
    assert "op-registration" in rules(body)


@pytest.mark.parametrize("body", [
    "@triton.jit\ndef k(x):\n    pass\nk.add_pre_run_hook(torch.exp)\n",
    "@triton.jit\ndef k(x):\n    pass\nk.pre_run_hooks.append(torch.exp)\n",
    "triton.knobs.runtime.launch_enter_hook.add(print)\n",
    "from triton import knobs\n",
    "import triton.knobs\n",
    "H = getattr(triton, 'knobs')\n",
])
def test_triton_launch_hooks(body: str) -> None:
    assert "launch-hook" in rules(body)


@pytest.mark.parametrize("body", [
    "def kernel_fn(x):\n    g = (i for i in [0])\n    return g.gi_frame.f_back\n",
    "def kernel_fn(x, frame):\n    return frame.f_locals['self']\n",
    "def kernel_fn(x, frame):\n    return frame.f_globals\n",
    "async def c():\n    pass\ndef kernel_fn(x):\n    return c().cr_frame\n",
    "def kernel_fn(x, g):\n    return g.ag_frame\n",
    "def kernel_fn(x, tb):\n    return tb.tb_frame\n",
    "def kernel_fn(x, code):\n    return code.co_consts\n",
    "def kernel_fn(x, g):\n    return getattr(g, 'gi_frame')\n",
    "def kernel_fn(x, cell):\n    return cell.cell_contents\n",
])
def test_frames_and_code_objects(body: str) -> None:
    assert "introspection" in rules(body)


def test_format_strings_cannot_read_attributes() -> None:
    assert "dynamic-attribute" in rules("def kernel_fn(x, g):\n    return '{0.gi_frame}'.format(g)\n")
    assert "dynamic-attribute" in rules("def kernel_fn(x, d):\n    return '{0[a]}'.format(d)\n")
    assert "dynamic-attribute" in rules("def kernel_fn(x, t):\n    return t.format(x)\n")
    assert "dynamic-attribute" in rules(
        "def kernel_fn(x, g):\n    return '{0:{1.f_back}}'.format(1, g)\n")
    assert rules("def kernel_fn(x):\n    return '{} x {}'.format(*x.shape)\n") == set()
    assert rules("MSG = 'rows={}'\ndef kernel_fn(x):\n    return MSG.format(x.shape[0])\n") \
        == set()


@pytest.mark.parametrize("body,rule", [
    ("import torch.utils.collect_env\n", "module-escape"),
    ("from torch.utils import collect_env\n", "module-escape"),
    ("def kernel_fn(x):\n    return torch.utils.collect_env.run('id')\n", "module-escape"),
    ("import numpy as np\nA = np.fromregex('/proc/self/environ', 'x', [('a', 'U9')])\n",
     "file-access"),
    ("import numpy as np\nM = np.lib.format.open_memmap('/tmp/x', mode='w+')\n", "file-access"),
    ("from numpy.lib import format\n", "file-access"),
    ("import numpy.lib.format as npy\n", "file-access"),
    ("import numpy as np\nL = np.lib\nW = L.format\n", "file-access"),
    ("import numpy as np\nC = np.ctypeslib\n", "module-escape"),
    ("import numpy as np\nC = getattr(np, 'ctypeslib')\n", "module-escape"),
    ("from numpy import ctypeslib\n", "import-not-allowed"),
    ("import numpy as np\nD = np.DataSource()\n", "file-access"),
    ("from numpy.testing import extbuild\n", "module-escape"),
    ("import typing\nH = typing.get_type_hints\n", "module-escape"),
    ("import functools\nF = functools.singledispatch\n", "module-escape"),
    ("import triton.testing\nN = triton.testing.nvsmi(['x'])\n", "module-escape"),
    ("from triton.runtime import build\n", "module-escape"),
    ("import torch.utils.benchmark\n", "module-escape"),
    ("import torch.fx\n", "module-escape"),
    ("def kernel_fn(x):\n    return torch.jit.script(f)(x)\n", "library-fallback"),
    ("A = torch.cuda.memory.CUDAPluggableAllocator('x.so', 'a', 'f')\n", "module-escape"),
    ("M = torch.overrides.TorchFunctionMode\n", "tensor-subclass"),
    ("G = torch.cuda.CUDAGraph()\n", "library-fallback"),
    ("def kernel_fn(x, g):\n    with torch.cuda.graph(g):\n        return x\n", "library-fallback"),
    ("import numpy as np\nnp.ones(2).dump('/tmp/x')\n", "file-access"),
    ("import torch.utils.model_zoo\n", "module-escape"),
    ("import triton\nB = triton.runtime.driver.active.utils.load_binary\n", "module-escape"),
    ("def kernel_fn(x):\n    return x.apply_(abs)\n", "host-readout"),
    ("class Mode:\n    def __torch_function__(self, *a):\n        pass\n", "tensor-subclass"),
])
def test_escapes_through_allowed_modules(body: str, rule: str) -> None:
    assert rule in rules(body)


@pytest.mark.parametrize("body", [
    # A binding somewhere else in the file does not make a free name defined where it is used.
    "def unused(inspect):\n    pass\ndef kernel_fn(x):\n    return inspect.stack()\n",
    "_ = [0 for inspect in ()]\ndef kernel_fn(x):\n    return inspect.stack()\n",
    "def kernel_fn(x):\n    def helper():\n        inspect = 1\n    return inspect.stack()\n",
    "class C:\n    inspect = 1\n    def method(self):\n        return inspect.stack()\n",
    "def kernel_fn(x):\n    [0 for inspect in ()]\n    return inspect\n",
])
def test_free_names_are_resolved_by_scope(body: str) -> None:
    assert rules(body) == {"undefined-name"}


def test_a_shadowing_comprehension_does_not_hide_module_state() -> None:
    body = "_CACHE = {}\ndef kernel_fn(x):\n    [0 for _CACHE in ()]\n    _CACHE[1] = x\n    return x\n"
    assert "call-time-state" in rules(body)


def test_names_bound_nowhere_are_refused() -> None:
    # The Triton interpreter copies its own globals (inspect, np, ...) into a kernel's module.
    assert rules("def kernel_fn(x):\n    return inspect.stack()\n") == {"undefined-name"}
    assert "undefined-name" in rules("def kernel_fn(x):\n    return interpreter_builder\n")
    honest = ("def kernel_fn(x):\n"
              "    sizes = [n for n in x.shape]\n"
              "    if (total := len(sizes)) > 1:\n"
              "        pass\n"
              "    try:\n"
              "        pass\n"
              "    except ValueError as error:\n"
              "        raise RuntimeError(str(error)) from None\n"
              "    return max(sizes), total, __name__, isinstance(x, torch.Tensor)\n")
    assert rules(honest) == set()


@pytest.mark.parametrize("body", [
    # An alias of module state, mutated.
    "_POOLS = {}\ndef kernel_fn(x):\n    pool = _POOLS[x.shape]\n    pool.append(x)\n    return x\n",
    "_POOLS = {}\ndef kernel_fn(x):\n    pool = _POOLS.get(0)\n    pool[0] = x\n    return x\n",
    # Reading a defaultdict writes it.
    ("import collections\n_D = collections.defaultdict(list)\ndef kernel_fn(x):\n"
     "    return _D[x.shape]\n"),
    # A module-level counter.
    "import itertools\n_TURN = itertools.count()\ndef kernel_fn(x):\n    return next(_TURN)\n",
    # A module-level tensor written in place.
    "_BUF = torch.zeros(4)\ndef kernel_fn(x):\n    _BUF.copy_(x)\n    return x\n",
    ("import collections\n_Q = collections.deque()\ndef kernel_fn(x):\n    _Q.rotate(1)\n"
     "    return x\n"),
    # Instance state written outside the constructor.
    ("class Launcher:\n    def __init__(self):\n        self.seen = {}\n"
     "    def __call__(self, x):\n        self.seen[x.shape] = x\n        return x\n"),
    "class Launcher:\n    def run(self, x):\n        self.last = x\n        return x\n",
    # A closure made at import time.
    ("def make():\n    cache = {}\n    def run(x):\n        cache[x.shape] = x\n        return x\n"
     "    return run\nkernel_fn = make()\n"),
    # The result of a cached helper, kept and mutated.
    ("import functools\n@functools.cache\ndef slot(n):\n    return []\n"
     "def kernel_fn(x):\n    held = slot(x.data_ptr())\n    held.append(x)\n    return x\n"),
])
def test_call_time_state_however_it_is_reached(body: str) -> None:
    assert "call-time-state" in rules(body)


def test_state_that_is_not_kept_across_calls_is_fine() -> None:
    assert rules("_TABLE = {1: 2}\ndef kernel_fn(x):\n    cfg = _TABLE[1]\n    return cfg\n") \
        == set()
    assert rules("_T = {1: 2}\ndef kernel_fn(x):\n    d = dict(_T)\n    d[3] = 4\n    return x\n") \
        == set()
    assert rules("def kernel_fn(x):\n    out = []\n    def add(t):\n        out.append(t)\n"
                 "    add(x)\n    return out[0]\n") == set()
    assert rules("class Config:\n    def __init__(self, n):\n        self.n = n\n"
                 "        self.sizes = []\n        self.sizes.append(n)\n") == set()


def test_call_time_state_names_the_accepted_config_cache() -> None:
    violations = scan_source((ADVERSARIAL_DIR / "honest_config_cache.py").read_text())
    assert [v.rule for v in violations] == ["call-time-state"]
    assert "functools.cache" in violations[0].message
