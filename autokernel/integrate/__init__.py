"""Using a finished run's kernels: splice them into a model, verify, report, export.

- `custom_ops`: each kernel as a torch.library custom op (fake implementation, autograd);
- `patch`: route a model's modules and functional calls to those ops;
- `loader`: read a finished run back (`autokernel.load(DIR)`);
- `verify`, `report`, `export`: the `autokernel verify|report|export DIR` commands.
"""
