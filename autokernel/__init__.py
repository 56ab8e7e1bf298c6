"""autokernel: profile a PyTorch model, optimize its hottest GPU kernels overnight, splice them back."""

__version__ = "0.1.0"
