"""LLaMA-7B layer shapes: d=4096, 32 heads, SwiGLU hidden 11008, vocab 32000, with 2 layers.

The same model as `llama.py` (imported from it, so both files must sit side by side), at the sizes
whose kernels a 7B model runs during prefill: 4×2048 tokens give matmuls of M=8192 against
4096×4096, 11008×4096 and 32000×4096 weights, and norms over 8192×4096 activations (64 MB in
fp16, larger than an H100/H200's L2). About 0.9 B parameters: 1.8 GB in fp16.
"""

from llama import LLAMA_7B_LAYERS, Model, init_inputs_for, inputs_for  # noqa: F401

BATCH = 4
SEQ_LEN = 2048


def get_inputs() -> list:
    return inputs_for(LLAMA_7B_LAYERS, BATCH, SEQ_LEN)


def get_init_inputs() -> list:
    return init_inputs_for(LLAMA_7B_LAYERS)
