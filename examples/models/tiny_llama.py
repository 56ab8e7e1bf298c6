"""A tiny LLaMA-style decoder (2 layers, d=64, GQA 4/2 heads, vocab 256) for CPU tests.

The same model as `llama.py` (imported from it, so both files must sit side by side): every
pattern the profiler looks for (hand-written RMSNorm, rotate-half RoPE, causal SDPA, SwiGLU MLP,
the output matmul) at sizes the CPU profiles in well under a second.
"""

from llama import TINY, Model, init_inputs_for, inputs_for  # noqa: F401

BATCH = 2
SEQ_LEN = 16


def get_inputs() -> list:
    return inputs_for(TINY, BATCH, SEQ_LEN)


def get_init_inputs() -> list:
    return init_inputs_for(TINY)
