"""The largest sizes a config takes (docs/configuration.md, "Limits on sizes").

Each bounds a whole number a user types well past any real run, so that a slip (a few zeros too
many, a pasted number of thousands of digits) is refused in one line naming the key, the limit
and the value, instead of exhausting memory or overflowing deep inside torch or numpy.
"""

from __future__ import annotations

from typing import Any

import attrs

MAX_STEPS = 10**12
"""``max_steps``, ``summary_freq``, ``checkpoint_interval``, ``time_horizon``: a trillion
steps, a thousand times the longest published single-task runs."""
MAX_EXPERIENCES = 10**9
"""``buffer_size`` and ``batch_size``: a billion experiences, far past what fits in memory
(each holds at least an observation, an action and a reward)."""
MAX_UNITS = 16_384
"""``hidden_units``, ``memory_size`` and the reward providers' ``encoding_size``: a layer of
16,384 units to the next holds 268 million weights (1 GB)."""
MAX_LAYERS = 1_000
"""``num_layers``."""
MAX_EPOCHS = 10_000
"""``num_epoch`` (of PPO's family and of behavioral cloning): passes over the buffer per
update."""
MAX_NUM_ENVS = 100_000
"""``env_settings.num_envs`` (and ``--num-envs``): environments stepped together per rank."""
MAX_SEED = 2**32 - 1
"""``env_settings.seed`` (and ``--seed``): a 32-bit seed, as numpy's and most environments'."""


def at_most(limit: int, unit: str) -> Any:
    """An attrs validator refusing a value above ``limit`` (``unit`` names what it counts)."""

    def check(_: Any, attribute: attrs.Attribute[Any], value: int) -> None:
        if value > limit:
            raise ValueError(f"expected at most {limit:,} {unit}, got {value}", attribute)

    return check
