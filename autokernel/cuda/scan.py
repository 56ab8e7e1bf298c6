"""The static scan's rules for a CUDA kernel file's C++ text (CUDA_SOURCE or its CUDA_FILE).

The Python part of the file goes through the ordinary scan (`harness.static_scan`); this module
reads the C++ without compiling it and reports `Violation`s in the same style, rule names reused
where the Python scan has one. What it refuses, and why:

- `import-not-allowed`: an `#include` outside `ALLOWED_INCLUDES` (CUDA's own device headers). The
  kernel must be the file's own code: no torch/ATen headers, and no CUTLASS, CuTe, CUB or Thrust,
  whose prebuilt algorithms would make the "kernel" a library call. (`mma.h` and `cuda/pipeline`
  stay: they are intrinsics for writing tensor-core and async-copy code, not algorithms.)
- `library-fallback`: host-side library compute: `at::`, `torch::`, `c10::`, cuBLAS(Lt), cuDNN,
  cuFFT, cuSPARSE, cuRAND host API, CUTLASS/CuTe/CUB/Thrust namespaces, and CUDA graphs.
- `module-escape`: processes and native code: system, popen, exec*, fork, dlopen/dlsym, syscall,
  getenv/setenv, signals, `__attribute__((constructor))` (code that runs when the library loads).
- `file-access`: fopen, open, std::fstream, unlink/remove/rename, mmap.
- `thread`: std::thread, pthread_create, std::async.
- `side-stream`: cudaStreamCreate*, cudaSetDevice, cudaLaunchHostFunc, cudaStreamAddCallback: the
  launcher must enqueue on the stream it is handed.
- `host-memory`: cudaMalloc*, cudaFree, cudaMemcpy*/cudaMemset*, cudaHostAlloc: buffers come
  from torch (kernel_fn allocates them), and device-to-host copies would read values on the host.
- `inline-asm`: inline assembly that calls out or stops the machine: PTX `call`, `.extern`,
  `trap`, `brkpt`, `pmevent`, `exit`, or any host `syscall`/`int`.
- `preprocessor-escape`: what would hide a name from this scan: token pasting (`##`), universal
  character names (`\\u0073ystem`), `#include` of a macro, `#pragma` other than unroll/once/
  diagnostics, `#line`.

Comments are dropped and backslash-newlines spliced first, as the preprocessor does, so a name
split across a line continuation is still seen. String literals are blanked for the name rules
(a message may say "system") and read for the asm rule.
"""

from __future__ import annotations

import ast
import re

from autokernel.backends.interface import Violation

# What a cuda kernel file may import beyond the Python allow-list: its launch runtime's
# `load_extension`, only (the runtime's launch observers and prebuilt table are the harness's).
RUNTIME_MODULES: dict[str, frozenset[str]] = {"autokernel.cuda.runtime":
                                              frozenset({"load_extension"})}

ALLOWED_INCLUDES: frozenset[str] = frozenset({
    "cuda_runtime.h", "cuda.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "stdint.h",
    "cstdint", "stddef.h", "cstddef", "float.h", "cfloat", "limits.h", "climits", "math.h",
    "cmath", "type_traits", "mma.h", "cuda/pipeline", "cuda/barrier", "cuda_pipeline.h",
    "cuda_awbarrier.h", "cooperative_groups.h", "cooperative_groups/reduce.h",
    "cooperative_groups/memcpy_async.h", "vector_types.h", "device_launch_parameters.h",
})

CUDA_RULES: dict[str, str] = {
    "import-not-allowed": "#include only CUDA's device headers and the C numeric headers",
    "library-fallback": "no host-side library compute: ATen/torch/c10, cuBLAS, cuDNN, CUTLASS, "
                        "CUB, Thrust, CUDA graphs",
    "module-escape": "no system/popen/exec/fork/dlopen/getenv/signals or load-time constructors",
    "file-access": "no files: fopen/open/fstream/unlink/mmap",
    "thread": "no host threads",
    "side-stream": "launch on the stream the launcher is handed; no streams or devices of its own",
    "host-memory": "no cudaMalloc/cudaFree/cudaMemcpy/cudaMemset: torch allocates the buffers",
    "inline-asm": "no inline assembly that calls out (call, .extern, trap, brkpt, exit, syscall)",
    "preprocessor-escape": "no token pasting, universal character names, macro includes or "
                           "pragmas beyond unroll/once/diagnostics",
}

_NAME_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (rule, re.compile(pattern)) for rule, pattern in (
        ("library-fallback", r"\b(?:at|torch|c10|cutlass|cute|cub|thrust|caffe2)\s*::"),
        ("library-fallback", r"\b(?:cublas\w*|cublasLt\w*|cudnn\w*|cufft\w*|cusparse\w*|"
                             r"cusolver\w*|curand(?:Create|Generate)\w*|nvrtc\w*|"
                             r"cudaGraph\w*|cudaStreamBeginCapture\w*)\b"),
        ("module-escape", r"\b(?:system|popen|pclose|execl|execlp|execle|execv|execvp|execvpe|"
                          r"execve|fexecve|fork|vfork|clone|posix_spawnp?|dlopen|dlsym|dlmopen|"
                          r"syscall|getenv|secure_getenv|setenv|putenv|unsetenv|signal|sigaction|"
                          r"raise|kill|ptrace|atexit|at_quick_exit|exit|_exit|abort|"
                          r"cuModuleLoad\w*|cuLibraryLoad\w*|cudaLibraryLoad\w*)\s*\("),
        ("module-escape", r"\b(?:constructor|destructor)\b\s*\)"),
        ("module-escape", r"\benviron\b"),
        ("file-access", r"\b(?:fopen|fdopen|freopen|open|openat|creat|unlink|remove|rename|"
                        r"mmap|truncate|ftruncate|opendir|mkdir|rmdir)\s*\("),
        ("file-access", r"\b(?:FILE|ifstream|ofstream|fstream|filebuf|filesystem)\b"),
        ("thread", r"\b(?:pthread_\w+|std\s*::\s*(?:thread|jthread|async))\b"),
        ("side-stream", r"\b(?:cudaStreamCreate\w*|cudaStreamDestroy|cudaSetDevice|"
                        r"cudaDeviceReset|cudaLaunchHostFunc|cudaStreamAddCallback|"
                        r"cudaStreamPerThread|cudaStreamLegacy|cudaEventCreate\w*)\b"),
        ("host-memory", r"\b(?:cudaMalloc\w*|cudaFree\w*|cudaMemcpy\w*|cudaMemset\w*|"
                        r"cudaHostAlloc|cudaHostRegister|cudaMallocHost|cudaMallocManaged|"
                        r"cuMem\w+)\b"),
    ))
_ASM_FORBIDDEN = re.compile(r"(?<![\w.%])(?:call(?:\.uni)?|\.extern|trap|brkpt|pmevent|exit|"
                            r"syscall|sysenter|int)\b")
_ALLOWED_PRAGMAS = re.compile(r"^\s*#\s*pragma\s+(?:unroll|nounroll|once|nv_diag_\w+|"
                              r"diag_suppress|diag_default)\b")


def _strip_comments(text: str) -> str:
    """Comments become spaces (newlines kept, so line numbers hold); strings stay."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end == -1 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end == -1 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif text[i] in "\"'":
            quote, j = text[i], i + 1
            while j < n and text[j] != quote and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _blank_strings(text: str) -> str:
    return re.sub(r'"(?:[^"\\\n]|\\.)*"', lambda m: '"' + " " * (len(m.group()) - 2) + '"', text)


def _spliced_lines(text: str) -> list[tuple[int, str]]:
    """Logical lines after backslash-newline splicing, each with its first physical line."""
    lines: list[tuple[int, str]] = []
    pending, start = "", 1
    for number, line in enumerate(text.split("\n"), 1):
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        lines.append((start, pending + line))
        pending = ""
    if pending:
        lines.append((start, pending))
    return lines


def _asm_statements(text: str) -> list[tuple[int, str]]:
    """(line, the string literals inside) of each asm(...) statement."""
    found = []
    for match in re.finditer(r"\b(?:asm|__asm__|__asm)\b(?:\s+(?:volatile|__volatile__|goto))*"
                             r"\s*\(", text):
        depth, j = 1, match.end()
        while j < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        body = text[match.end():j]
        strings = " ".join(re.findall(r'"((?:[^"\\\n]|\\.)*)"', body))
        found.append((text.count("\n", 0, match.start()) + 1, strings))
    return found


def scan_cuda_source(source: str, first_line: int = 1) -> list[Violation]:
    """Every rule the C++ text breaks, in line order; `first_line` is where the text starts in
    the file that holds it (kernel.py's CUDA_SOURCE line), so lines point into that file."""
    offset = first_line - 1
    violations: list[Violation] = []
    if re.search(r"\\[uU][0-9A-Fa-f]{4}", _blank_strings(_strip_comments(source))):
        line = next(i for i, text in enumerate(source.split("\n"), 1)
                    if re.search(r"\\[uU][0-9A-Fa-f]{4}", text))
        violations.append(Violation("preprocessor-escape", line + offset,
                                    "universal character name outside a string"))
    code = _strip_comments(source)
    for line, text in _spliced_lines(code):
        names = _blank_strings(text)
        directive = re.match(r"^\s*#\s*(\w+)\s*(.*)$", text)
        if directive:
            violations.extend(_check_directive(directive.group(1), directive.group(2), text,
                                               line + offset))
        if "##" in names:
            violations.append(Violation("preprocessor-escape", line + offset, "token pasting (##)"))
        for rule, pattern in _NAME_RULES:
            for match in pattern.finditer(names):
                violations.append(Violation(rule, line + offset,
                                            f"{match.group().strip(' (')!r} in the CUDA source"))
    for line, strings in _asm_statements(code):
        for match in _ASM_FORBIDDEN.finditer(strings):
            violations.append(Violation("inline-asm", line + offset,
                                        f"inline assembly uses {match.group()!r}"))
    unique = {(v.line, v.rule, v.message): v for v in violations}
    return sorted(unique.values(), key=lambda v: (v.line, v.rule))


def _check_directive(name: str, rest: str, text: str, line: int) -> list[Violation]:
    if name == "include":
        header = re.match(r'^[<"]([^>"]+)[>"]\s*$', rest.strip())
        if header is None:
            return [Violation("preprocessor-escape", line, f"#include of a macro: {rest.strip()}")]
        if header.group(1) not in ALLOWED_INCLUDES:
            return [Violation("import-not-allowed", line,
                              f"#include <{header.group(1)}> is not on the allow-list")]
    elif name == "pragma" and not _ALLOWED_PRAGMAS.match(text):
        return [Violation("preprocessor-escape", line, f"#pragma {rest.strip()}")]
    elif name in ("line", "include_next", "import", "embed"):
        return [Violation("preprocessor-escape", line, f"#{name}")]
    return []


def scan_cuda_parts(tree: ast.Module, cuda_file_text: str | None = None) -> list[Violation]:
    """The C++ rules on a cuda kernel file's CUDA_SOURCE (lines in kernel.py) or on its
    CUDA_FILE's text (lines in that file, said in the message)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CUDA_SOURCE"
                                                for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return scan_cuda_source(node.value.value, first_line=node.value.lineno)
    if cuda_file_text is None:
        return []
    return [Violation(v.rule, v.line, f"CUDA_FILE line {v.line}: {v.message}")
            for v in scan_cuda_source(cuda_file_text)]


def cuda_kernel_file(tree: ast.Module) -> bool:
    """Whether the module assigns BACKEND = "cuda" at module level."""
    return any(isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "BACKEND"
                                                    for t in node.targets)
               and isinstance(node.value, ast.Constant) and node.value.value == "cuda"
               for node in tree.body)
