"""On the CPU, a kernel must also compile for a GPU target before it can PASS.

The Triton interpreter runs a `@triton.jit` body as Python: a body that calls numpy, or anything
else the compiler would refuse, passes every interpreted check. So a CPU verdict that would be
PASS is held until each Triton launch the kernel made at the smoke shape has compiled for sm_90
(`autokernel.aot`'s check: `triton.compile` for `GPUTarget("cuda", 90, 32)`, its shared memory
and block size within Hopper's limits):

1. in the candidate process, the launch monitor records the smoke call's launches and Triton's
   own binder specialises them as the JIT would on the GPU (`requests_from_launches`); they come
   to the judge as plain data, which it checks (`decode_requests`);
2. the runner then starts a compile process (`check`): a fresh interpreter that imports Triton
   for compiling, applies the candidate sandbox to itself (reads of the installs and its own
   directory, writes only there, execution only of ptxas and cuobjdump), and only then imports
   the kernel file and compiles each request. Its answer can only stop a PASS.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

GATE_TIMEOUT_S = 300.0
MAX_REQUESTS = 32
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")


def requests_from_launches(recorded: list[tuple[Any, Any, tuple[Any, ...], dict[str, Any]]],
                           context: str) -> list[dict[str, Any]]:
    """The recorded launches, specialised for sm_90 as JSON-ready dicts (candidate process)."""
    from autokernel.aot import KernelLaunch, _dedupe, gpu_target, specialize

    requests = _dedupe([specialize(KernelLaunch(fn, grid, args, kwargs), gpu_target(), context)
                        for fn, grid, args, kwargs in recorded])
    return [_encoded(r) for r in requests[:MAX_REQUESTS]]


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _encoded(request: Any) -> dict[str, Any]:
    return {"kernel": request.kernel, "context": request.context,
            "signature": {str(k): str(v) for k, v in request.signature.items()},
            "constexprs": [[list(k), _plain(v)] for k, v in request.constexprs.items()],
            "attrs": [[list(k), _plain(v)] for k, v in request.attrs.items()],
            "options": {str(k): _plain(v) for k, v in request.options.items()
                        if isinstance(v, (bool, int, float, str, type(None), list, tuple))},
            "grid": [int(g) for g in request.grid]}


def decode_requests(data: Any) -> list[dict[str, Any]]:
    """The requests a candidate process sent, checked to be what `_encoded` makes."""
    if not isinstance(data, list) or not 0 < len(data) <= MAX_REQUESTS:
        raise ValueError("compile requests must be a non-empty list")
    checked = []
    for item in data:
        if not isinstance(item, dict) or set(item) != {"kernel", "context", "signature",
                                                       "constexprs", "attrs", "options", "grid"}:
            raise ValueError("a malformed compile request")
        if not isinstance(item["kernel"], str) or not _NAME.match(item["kernel"]):
            raise ValueError("a compile request for no plain kernel name")
        json.dumps(item)  # plain data only
        if len(json.dumps(item)) > 20_000:
            raise ValueError("an oversized compile request")
        checked.append(item)
    return checked


def _decoded(item: dict[str, Any]) -> Any:
    from autokernel.aot import CompileRequest

    def keyed(pairs: list[list[Any]]) -> dict[tuple[int, ...], Any]:
        return {tuple(k): (tuple(tuple(x) if isinstance(x, list) else x for x in v)
                           if isinstance(v, list) else v) for k, v in pairs}

    options = {k: tuple(v) if isinstance(v, list) else v for k, v in item["options"].items()}
    return CompileRequest(kernel=item["kernel"], context=item["context"],
                          signature=dict(item["signature"]), constexprs=keyed(item["constexprs"]),
                          attrs=keyed(item["attrs"]), options=options, grid=list(item["grid"]))


def check(kernel_source: str, requests: list[dict[str, Any]], work_dir: Path,
          env: dict[str, str], timeout_s: float = GATE_TIMEOUT_S) -> str | None:
    """Compile the requests in a sandboxed child; None when all compile, else why not."""
    home = work_dir / "aot"
    home.mkdir(parents=True, exist_ok=True)
    (home / "kernel.py").write_text(kernel_source, encoding="utf-8")
    (home / "cache").mkdir(exist_ok=True)
    child_env = {k: v for k, v in env.items() if k != "TRITON_INTERPRET"}
    child_env.update({"TRITON_CACHE_DIR": str(home / "cache"), "HOME": str(home),
                      "TMPDIR": str(home)})
    command = [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-c",
               "from autokernel.harness.aot_gate import main; main()"]
    try:
        done = subprocess.run(command, input=json.dumps(requests), capture_output=True,
                              text=True, cwd=home, env=child_env, timeout=timeout_s,
                              start_new_session=True)
    except subprocess.TimeoutExpired:
        return f"the sm_90 compile did not finish within {timeout_s:g} s"
    finally:
        shutil.rmtree(home / "cache", ignore_errors=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])[-400:]
        return f"the sm_90 compile process failed (exit {done.returncode}): {tail}"
    try:
        results = json.loads(lines[-1])["results"]
    except (ValueError, KeyError, TypeError):
        return "the sm_90 compile process gave no readable answer"
    failed = [r for r in results if not r.get("ok")]
    if not results:
        return "the sm_90 compile process compiled nothing"
    if failed:
        first = failed[0]
        return (f"{first.get('kernel')} [{first.get('context')}] does not compile for sm_90 "
                f"(the Triton interpreter ran it as Python): {first.get('error')}")
    return None


def main() -> None:
    """The compile process: sandbox itself, then import the kernel file and compile."""
    requests = [_decoded(item) for item in decode_requests(json.loads(sys.stdin.read()))]
    import triton

    from autokernel.aot import HOPPER_ARCH, _compile_requests
    from autokernel.harness import sandbox

    tools = []
    for knob in ("ptxas", "cuobjdump"):
        try:
            tool = getattr(triton.knobs.nvidia, knob)
            path = tool.path if tool is not None else None
        except Exception:  # the knob resolves lazily and may find no binary
            path = None
        if path and os.access(path, os.X_OK):
            tools.append(Path(path).resolve())
    home = Path.cwd()
    # What the toolchain reads is the GPU's list (/usr: the loader and libc of ptxas).
    sandbox.apply_candidate_sandbox(home, writable=[home / "cache"], executables=tools,
                                    device="cpu",
                                    readable=sandbox.candidate_readable(home, "cuda"))
    results = _compile_requests(home / "kernel.py", requests, HOPPER_ARCH)
    print(json.dumps({"results": [{"kernel": r.kernel, "context": r.context, "ok": r.ok,
                                   "error": r.error[:400]} for r in results]}))
    sys.stdout.flush()
    os._exit(0)
