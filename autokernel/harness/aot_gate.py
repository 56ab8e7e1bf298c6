"""On the CPU, a kernel must also compile for a GPU target before it can PASS.

The Triton interpreter runs a `@triton.jit` body as Python: a body that calls numpy, or anything
else the compiler would refuse, passes every interpreted check. So a CPU verdict that would be
PASS is held until every Triton launch the kernel made in any correctness call lowers for sm_90:
the first (smoke) call's launches compile in full (`autokernel.aot`'s check: `triton.compile`
for `GPUTarget("cuda", 90, 32)`, its shared memory and block size within Hopper's limits), and
each other distinct specialisation (kernel, dtypes, constexprs, options: a kernel that runs a
numpy body everywhere but at the smoke shape shows there) is lowered to Triton IR, the step
where the code generator runs the body's Python (~0.05 s each, against ~1 s for a full compile):

1. in the candidate process, the launch monitor records every correctness call's launches (the
   judge asks for it in each call, ghost replays aside) and Triton's own binder specialises them
   as the JIT would on the GPU (`requests_from_launches`, each distinct one once); after the
   correctness stages they come to the judge as plain data, which it checks (`decode_requests`);
2. the runner then starts a compile process (`check`), forked from the compile fork server
   (`forkserver`, mode `compile`: Triton imported for compiling and its compiler warmed up once
   per harness process) or spawned: it applies the candidate sandbox to itself (reads of the
   installs and its own directory, writes only there, execution only of ptxas and cuobjdump),
   and only then imports the kernel file and compiles each request. Its answer comes on a
   private pipe once every request was tried, and can only stop a PASS.

What this leaves: the launches to compile are recorded in the candidate process, and the
compile process imports the kernel file; a kernel that escapes the static scan runs code in both,
so it could report launches of another kernel than the one it ran, or write a forged answer on
the pipe. Without a scan escape, neither is possible; on a GPU the kernel's real compile and
launch are the check.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

GATE_TIMEOUT_S = 300.0
MAX_REQUESTS = 1024  # distinct specialisations over every correctness call
MAX_LOWERED = 256  # lowered to Triton IR at most (a random sample of them beyond)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")


def requests_from_launches(recorded: list[tuple[Any, Any, tuple[Any, ...], dict[str, Any]]],
                           context: str, known: list[dict[str, Any]] | None = None
                           ) -> list[dict[str, Any]]:
    """`known` and the recorded launches, specialised for sm_90 as JSON-ready dicts, each
    distinct specialisation once (candidate process). Launches that differ only in their grid
    or their alignment attributes are one request: those change no Python the compiler runs
    (the body's code generation follows the dtypes, constexprs and options), and the grid kept
    is the largest extent per axis seen, which the launch limits are checked against."""
    from autokernel.aot import KernelLaunch, gpu_target, specialize

    distinct = {_key(request): request for request in known or []}
    for fn, grid, args, kwargs in recorded:
        encoded = _encoded(specialize(KernelLaunch(fn, grid, args, kwargs), gpu_target(),
                                      context))
        seen = distinct.setdefault(_key(encoded), encoded)
        if seen is not encoded:
            width = max(len(seen["grid"]), len(encoded["grid"]))
            seen["grid"] = [max(a, b) for a, b in zip(seen["grid"] + [1] * width,
                                                      encoded["grid"] + [1] * width)][:width]
    return list(distinct.values())


def _key(request: dict[str, Any]) -> str:
    return json.dumps([request[k] for k in ("kernel", "signature", "constexprs", "options")],
                      sort_keys=True)


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
    """The requests a candidate process sent, checked to be what `_encoded` makes (none when
    its calls launched nothing: the runner's gate then fails the PASS)."""
    if not isinstance(data, list) or len(data) > MAX_REQUESTS:
        raise ValueError(f"compile requests must be a list of at most {MAX_REQUESTS}")
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


def take_requests(data: Any) -> list[dict[str, Any]]:
    """`decode_requests` in the judge: a malformed answer is the candidate process's (a CRASH)."""
    from autokernel.harness.channel import BadMessage

    try:
        return decode_requests(data)
    except ValueError as exc:
        raise BadMessage(f"compile requests: {exc}") from None


def _decoded(item: dict[str, Any], frontend_only: bool) -> Any:
    from autokernel.aot import CompileRequest

    def keyed(pairs: list[list[Any]]) -> dict[tuple[int, ...], Any]:
        return {tuple(k): (tuple(tuple(x) if isinstance(x, list) else x for x in v)
                           if isinstance(v, list) else v) for k, v in pairs}

    options = {k: tuple(v) if isinstance(v, list) else v for k, v in item["options"].items()}
    return CompileRequest(kernel=item["kernel"], context=item["context"],
                          signature=dict(item["signature"]), constexprs=keyed(item["constexprs"]),
                          attrs=keyed(item["attrs"]), options=options, grid=list(item["grid"]),
                          frontend_only=frontend_only)


def _plan(items: list[dict[str, Any]]) -> list[Any]:
    """The first call's launches compile in full (limits included); every other specialisation
    is lowered to Triton IR, which runs all of its body's Python through the code generator:
    once per kernel, dtypes and constexprs (the options, num_warps and the like, change nothing
    there), at most `MAX_LOWERED` of them, drawn at random here (before the kernel file is
    imported) when there are more (an autotuner's every config at every shape)."""
    import secrets

    full = [_decoded(item, False) for item in items if item["context"] == items[0]["context"]]
    lowered: dict[str, dict[str, Any]] = {}
    for item in items:
        if item["context"] != items[0]["context"]:
            key = json.dumps([item[k] for k in ("kernel", "signature", "constexprs")],
                             sort_keys=True)
            lowered.setdefault(key, item)
    chosen = list(lowered.values())
    if len(chosen) > MAX_LOWERED:
        chosen = secrets.SystemRandom().sample(chosen, MAX_LOWERED)
    return full + [_decoded(item, True) for item in chosen]


def check(kernel_source: str, requests: list[dict[str, Any]], work_dir: Path,
          env: dict[str, str], timeout_s: float = GATE_TIMEOUT_S) -> str | None:
    """Compile the requests in a sandboxed compile process; None when all compile, else why
    not. The process is forked from the compile fork server when one runs (Triton imported and
    its compiler warmed up once per harness process), else spawned."""
    from autokernel.harness.spawn import run_child

    home = work_dir / "aot"
    home.mkdir(parents=True, exist_ok=True)
    (home / "kernel.py").write_text(kernel_source, encoding="utf-8")
    (home / "cache").mkdir(exist_ok=True)
    child_env = {k: v for k, v in env.items() if k != "TRITON_INTERPRET"}
    child_env.update({"TRITON_CACHE_DIR": str(home / "cache"), "HOME": str(home),
                      "TMPDIR": str(home)})

    def request_text(result_fd: int) -> bytes:
        return json.dumps({"result_fd": result_fd, "requests": requests}).encode()

    try:
        returncode, raw, tail, timed_out = run_child(
            "compile", request_text, child_env, home, timeout_s,
            per_call_env=("HOME", "TMPDIR", "TRITON_CACHE_DIR"))
    finally:
        shutil.rmtree(home / "cache", ignore_errors=True)
    if timed_out:
        return f"the sm_90 compile did not finish within {timeout_s:g} s"
    try:
        answer = json.loads(raw)
        results = answer["results"]
        if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
            raise TypeError("results that are not a list of objects")
    except (ValueError, KeyError, TypeError):
        lines = " | ".join(tail.strip().splitlines()[-3:])[-400:]
        return f"the sm_90 compile process gave no answer (exit {returncode}): {lines}"
    if not results:
        return "the sm_90 compile process compiled nothing"
    failed = [r for r in results if r.get("ok") is not True]
    if failed:
        first = failed[0]
        return (f"{first.get('kernel')} [{first.get('context')}] does not compile for sm_90 "
                f"(the Triton interpreter ran it as Python): {first.get('error')}")
    return None


def warm_up() -> None:
    """In the compile fork server, once: compile a kernel of the harness's own for sm_90 (in a
    cache deleted afterwards), so that each forked compile process starts with Triton's
    compiler initialised."""
    import tempfile

    import triton
    import triton.language as tl
    from triton.compiler import ASTSource

    from autokernel.aot import gpu_target

    @triton.jit
    def copy_rows(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)

    previous = os.environ.get("TRITON_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="autokernel-aot-warm-") as cache:
        os.environ["TRITON_CACHE_DIR"] = cache
        try:
            source = ASTSource(copy_rows, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                               {(2,): 64}, {})
            triton.compile(source, target=gpu_target())
        except Exception:  # a toolchain that cannot compile shows in each check's own answer
            pass
        finally:
            if previous is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = previous


def main() -> None:
    """The compile process: sandbox itself, then import the kernel file and compile. Its answer
    goes on the result pipe (never stdout, which the kernel's own code may print to), and only
    once every request was tried: a kernel file that exits during its import gives none."""
    request = json.loads(sys.stdin.read())
    result = os.fdopen(int(request["result_fd"]), "w", encoding="utf-8")
    requests = _plan(decode_requests(request["requests"]))
    import triton

    from autokernel.aot import HOPPER_ARCH, compile_requests
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
    try:
        # This process interprets nothing, so the compile runs here, not in a child.
        compiled = compile_requests(home / "kernel.py", requests, HOPPER_ARCH)
        answer: dict[str, Any] = {"results": [
            {"kernel": r.kernel, "context": r.context, "ok": r.ok, "error": r.error[:400]}
            for r in compiled]}
    except BaseException as exc:  # noqa: BLE001 - the kernel file's import may raise anything
        answer = {"results": [{"kernel": "kernel.py", "context": "import", "ok": False,
                               "error": f"{type(exc).__name__}: {str(exc)[:300]}"}]}
    result.write(json.dumps(answer))
    result.flush()
    sys.stdout.flush()
    os._exit(0)
