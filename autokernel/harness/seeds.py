"""Every seed of a job, derived from its master secret by a keyed hash.

The master secret never leaves the judge. Each case's inputs, each timed call's inputs and each
random choice the judge makes come from `derive_seed(master, label...)`: HMAC-SHA256 keyed with
the master, over a label that names the use ("case", 12). Knowing any number of derived seeds
(a candidate can recover one from the inputs it is handed, by brute force over a generator's
seed) says nothing about the master or about any other label's seed, unlike the old linear
`master + stride * index`, where one seed gave all of them.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

MASTER_BITS = 256
SEED_MASK = 2**63 - 1  # torch.Generator.manual_seed takes a signed 64-bit value


def new_master() -> int:
    """A fresh master secret for one job."""
    return secrets.randbits(MASTER_BITS)


def derive_seed(master: int, *label: object) -> int:
    """The seed for `label` (e.g. ("case", 12) or ("timed", 0, 41)) under `master`."""
    key = master.to_bytes(MASTER_BITS // 8, "little")
    message = "\x1f".join(str(part) for part in label).encode()
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "little") & SEED_MASK


def case_seed(master: int, index: int) -> int:
    """The seed of the judge's case number `index`."""
    return derive_seed(master, "case", index)


def timed_call_seed(master: int, shape_index: int, call: int) -> int:
    """The seed of timed call `call` of the candidate at timed shape `shape_index`."""
    return derive_seed(master, "timed", shape_index, call)
