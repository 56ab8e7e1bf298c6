"""The CUDA C++ backend (issue 15): kernel files with `BACKEND = "cuda"`.

- `build`: nvcc -> shared library, content-cached; the real target (sm_90a on Hopper).
- `runtime`: what a kernel file imports to launch its `extern "C"` launchers through ctypes.
- `scan`: the static scan's rules for the C++ text.
- `resources`: registers, spills and shared memory from ptxas's report.
- `aot`: `python -m autokernel.aot check` for a CUDA kernel file (compile for sm_90a on a CPU).
"""
