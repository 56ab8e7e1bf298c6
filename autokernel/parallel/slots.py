"""`--gpus all|N|0,2,3`: which workers judge a run's experiments, and each one's environment.

On a GPU a worker is one GPU, named by the index `nvidia-smi` gives it (within the head's own
CUDA_VISIBLE_DEVICES when that is set) and pinned to it with CUDA_VISIBLE_DEVICES. On the CPU a
worker is one Triton-interpreter process standing in for a GPU ("cpu0", "cpu1"...), so every path
of a multi-GPU night runs, and is tested, without one.

Every worker runs with NVLink multicast off (`NVLINK_MULTICAST_OFF`): nothing here needs it, and
on machines lent with several GPUs it must stay off.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# Set in every worker's environment (and kept by the harness for its candidate processes).
NVLINK_MULTICAST_OFF: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
ALL = "all"


class GpuSpecError(ValueError):
    """--gpus names GPUs this machine does not have, or is not all, a count or a list."""


@dataclass(frozen=True)
class Slot:
    """One worker: its label (results.tsv's gpu column), its device, and for a GPU the value of
    CUDA_VISIBLE_DEVICES that pins it."""

    label: str
    device: str  # "cuda" | "cpu"
    visible: str | None = None

    def env(self) -> dict[str, str]:
        """What the worker's process environment gets on top of the head's."""
        env = dict(NVLINK_MULTICAST_OFF)
        if self.visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.visible
        return env


def parse_gpus(text: str) -> str | int | list[int]:
    """"all", a count ("4") or a list of indices ("0,2,3"; an index named twice is two workers
    on that GPU); GpuSpecError otherwise."""
    text = text.strip().lower()
    if text == ALL:
        return ALL
    if "," not in text:
        try:
            count = int(text)
        except ValueError:
            raise GpuSpecError(f"--gpus takes all, a count or a list such as 0,2,3; not "
                               f"{text!r}") from None
        if count < 1:
            raise GpuSpecError(f"--gpus needs at least one GPU; got {count}")
        return count
    try:
        indices = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise GpuSpecError(f"--gpus {text}: a list of GPU indices such as 0,2,3") from None
    if not indices or any(i < 0 for i in indices):
        raise GpuSpecError(f"--gpus {text}: GPU indices, 0 or more")
    return indices


def machine_gpus() -> list[str]:
    """The CUDA_VISIBLE_DEVICES entry of each GPU this process may use, in CUDA's order: the
    head's own CUDA_VISIBLE_DEVICES entries when it has one, else "0".."N-1"."""
    import torch

    count = torch.cuda.device_count()
    given = [e.strip() for e in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if e.strip()]
    if given:
        return given[:count]
    return [str(i) for i in range(count)]


def local_slots(spec: str, device: str, gpus: list[str] | None = None,
                cpu_count: int | None = None) -> list[Slot]:
    """The workers `--gpus spec` asks for on this machine (`gpus`: `machine_gpus()` by default;
    on the CPU, `all` is one interpreter worker per core)."""
    wanted = parse_gpus(spec)
    if device == "cpu":
        cores = cpu_count or os.cpu_count() or 1
        indices = (list(range(cores)) if wanted == ALL else
                   list(range(wanted)) if isinstance(wanted, int) else wanted)
        return [Slot(label=f"cpu{label}", device="cpu") for label in unique_labels(indices)]
    available = machine_gpus() if gpus is None else gpus
    if not available:
        raise GpuSpecError("--gpus: torch sees no CUDA GPU on this machine")
    if wanted == ALL:
        indices = list(range(len(available)))
    elif isinstance(wanted, int):
        if wanted > len(available):
            raise GpuSpecError(f"--gpus {wanted}: this machine has {len(available)} GPU"
                               f"{'s' if len(available) != 1 else ''}")
        indices = list(range(wanted))
    else:
        missing = [i for i in wanted if i >= len(available)]
        if missing:
            raise GpuSpecError(f"--gpus {spec}: no GPU {', '.join(map(str, missing))} here "
                               f"(GPUs 0..{len(available) - 1})")
        indices = wanted
    return [Slot(label=label, device="cuda", visible=available[i])
            for i, label in zip(indices, unique_labels(indices))]


def unique_labels(indices: list[int]) -> list[str]:
    """A label per worker: the GPU's index, and for a GPU named again ("--gpus 0,0": two workers
    sharing one GPU, which exercises every multi-GPU path on a one-GPU machine) "0.1", "0.2"."""
    seen: dict[int, int] = {}
    labels = []
    for i in indices:
        labels.append(f"{i}.{seen[i]}" if i in seen else str(i))
        seen[i] = seen.get(i, 0) + 1
    return labels


def requested_count(spec: str, device: str) -> int | None:
    """How many workers `spec` names without looking at a machine (None for `all`)."""
    wanted = parse_gpus(spec)
    if wanted == ALL:
        return None
    return wanted if isinstance(wanted, int) else len(wanted)


def one_model(names: dict[str, str]) -> str | None:
    """Why these workers cannot judge one run together, or None: GPUs of different models are
    refused (a keep is judged on the candidate's GPU, but the move-on rules and the report
    compare the best kernels' figures across targets, which only means something on one model).
    `names`: the device name each worker reported, by label."""
    models = sorted(set(names.values()))
    if len(models) <= 1:
        return None
    by_model = "; ".join(f"{m}: {', '.join(sorted(k for k, v in names.items() if v == m))}"
                         for m in models)
    first = sorted({k.split(".")[0] for k, v in names.items() if v == models[0]})
    example = f", e.g. --gpus {','.join(first)}" if all(k.isdigit() for k in first) else ""
    return f"--gpus mixes GPU models ({by_model}); pick GPUs of one model{example}"
