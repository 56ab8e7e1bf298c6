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
                                  "tamper_obfuscated.py", "fallback_torch.py"])
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
    assert rules("NAME = kernel_fn.__name__ if False else 'x'\n") == set()


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
