"""Observations as the networks see them: vectors and images, one flat row per observation.

An environment's observation space is a ``Box``, a ``Discrete`` or a Gymnasium ``Dict`` of them.
Each part is

* an **image** when it is a ``Box`` of rank 3: ``H x W x C`` (channels last, Gymnasium's and
  ML-Agents' layout) or ``C x H x W`` (channels first), told apart by which end is smaller
  (channels first when the first dimension is smaller than the last; ties are channels
  last).  ``uint8`` images are scaled to ``[0, 1]`` inside the network; float images are
  taken as they are;
* a **vector** otherwise: flattened, as evtrain always did;
* a **one-hot vector** of ``n`` columns for a ``Discrete(n)``
  (:mod:`evtrain.trainers.discrete_observations`), in the rows and the exported policy's input.

A ``Dict`` part keyed ``action_mask`` (:data:`MASK_KEY`, PettingZoo's name) is neither: it is
the **action mask** of a ``Discrete`` action space (:mod:`evtrain.trainers.networks.masks`),
one entry per action (of a ``MultiDiscrete`` or hybrid one: of every branch, the branches'
masks concatenated).  It stays in the row, but no network takes it as a feature, the
normaliser leaves it alone and no encoder sees it; the policies read it from the row
(:attr:`ObservationLayout.mask`).

The trainers keep what they stored before: one flat float32 row per observation (PPO's
rollout, SAC's replay buffer), raw values and all.  An :class:`ObservationLayout` says where
each part sits in the row: the vectors first (in the ``Dict``'s key order), then the action
mask, then the float images, then the ``uint8`` images, which SAC's replay buffer keeps as
bytes.  In front of each
network an :class:`ObservationEncoder` splits the row again, as ML-Agents' ``NetworkBody``
does: vectors pass on, each image goes through its own ``vis_encode_type`` encoder
(:mod:`evtrain.trainers.networks.encoders`, ``hidden_units`` features), and the features are
concatenated before the hidden layers (the mask is left out).  The observation normaliser
standardises the vector columns only (ML-Agents normalises vector observations only).

Observations without images or a mask get no encoder at all: the networks, their initial weights and
their results are exactly those of a vector-only evtrain, and ``vis_encode_type`` has no
effect, as in ML-Agents.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import torch
from gymnasium import spaces
from torch import nn

from evtrain.errors import ConfigError, SpaceMismatchError
from evtrain.trainers.discrete_observations import encoded, one_hot
from evtrain.trainers.networks.action_heads import action_heads
from evtrain.trainers.networks.encoders import MIN_RESOLUTION, build_encoder, too_small
from evtrain.trainers.networks.normalizer import ObservationNormalizer
from evtrain.trainers.settings import NetworkSettings, VisEncodeType

BOX_INPUT = "obs"
"""The exported policy's input name for a ``Box`` observation (a ``Dict``'s are its keys)."""
MASK_KEY = "action_mask"
"""The ``Dict`` key of an action mask (PettingZoo's): also the exported policy's input name
for it."""


@attrs.frozen(kw_only=True)
class ObservationPart:
    """One ``Box`` of the observation and its columns ``[start, start + size)`` in the row."""

    key: str | None
    """Its key in a ``Dict`` observation; ``None`` for a ``Box`` observation."""
    shape: tuple[int, ...]
    """As the environment gives it."""
    start: int
    image: bool
    mask: bool = False
    """The action mask (:data:`MASK_KEY`): in the row, not a feature."""
    channels_first: bool = False
    """Images only: ``C x H x W`` rather than ``H x W x C``."""
    scale: float = 1.0
    """Images only: what the network multiplies pixels by (``1/255`` for ``uint8``)."""
    one_hot: bool = False
    """A ``Discrete`` observation: its index becomes :attr:`size` one-hot columns."""
    first: int = 0
    """One-hot only: the ``Discrete``'s first value (its ``start``), the first column."""

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def chw(self) -> tuple[int, int, int]:
        """An image's ``(C, H, W)``."""
        a, b, c = self.shape
        return (a, b, c) if self.channels_first else (c, a, b)

    def describe(self) -> str:
        """How an error message names it: ``the observation`` or ``observation 'key'``."""
        return "the observation" if self.key is None else f"observation {self.key!r}"


def _part(key: str | None, space: spaces.Space[Any], start: int) -> ObservationPart:
    if isinstance(space, spaces.Discrete) and key != MASK_KEY:
        n, first = int(space.n), int(space.start)
        return ObservationPart(
            key=key, shape=(n,), start=start, image=False, one_hot=True, first=first
        )
    if not isinstance(space, spaces.Box):
        where = "" if key is None else f" (key {key!r})"
        raise SpaceMismatchError(
            f"evtrain trainers need a Box or Discrete observation space, or a Dict of them, "
            f"got {type(space).__name__}{where}; wrap the environment with "
            "gymnasium.wrappers.FlattenObservation"
        )
    shape = tuple(int(d) for d in space.shape)
    if key == MASK_KEY:
        return ObservationPart(key=key, shape=shape, start=start, image=False, mask=True)
    if len(shape) != 3:
        return ObservationPart(key=key, shape=shape, start=start, image=False)
    scale = 1.0 / 255.0 if space.dtype == np.uint8 else 1.0
    return ObservationPart(
        key=key,
        shape=shape,
        start=start,
        image=True,
        channels_first=shape[0] < shape[2],
        scale=scale,
    )


def observation_layout(
    space: spaces.Space[Any], action_space: spaces.Space[Any] | None = None
) -> ObservationLayout:
    """The layout of ``space``'s observations (see the module's docs), its action mask, if
    any, checked against ``action_space`` when given.

    :raises SpaceMismatchError: ``space`` is not a ``Box`` or a ``Dict`` of ``Box`` spaces,
        holds nothing but an action mask, or its action mask does not fit ``action_space``
        (:meth:`ObservationLayout.check_mask`).
    """
    if not isinstance(space, spaces.Dict):
        return ObservationLayout(parts=(_part(None, space, 0),), keys=None)
    keys = tuple(str(k) for k in space.spaces)
    found = [_part(k, space.spaces[k], 0) for k in keys]
    if all(p.mask for p in found):
        raise SpaceMismatchError(
            f"the observation holds nothing but {MASK_KEY!r}, expected the observation itself "
            f"beside the action mask (e.g. Dict(observation=Box, {MASK_KEY}=Box))"
        )
    # Vectors first (the normaliser's columns), then the mask, uint8 images last (the replay
    # buffer's bytes).
    found.sort(key=lambda p: (p.image or p.mask, p.image, p.scale != 1.0))
    parts, start = [], 0
    for part in found:
        parts.append(attrs.evolve(part, start=start))
        start += part.size
    layout = ObservationLayout(parts=tuple(parts), keys=keys)
    if action_space is not None:
        layout.check_mask(action_space)
    return layout


def behavior_layout(
    space: spaces.Space[Any],
    network: NetworkSettings,
    behavior_name: str,
    action_space: spaces.Space[Any] | None = None,
) -> ObservationLayout:
    """:func:`observation_layout`, checked against ``network``'s ``vis_encode_type`` and (when
    given) ``action_space``: what a trainer calls first.

    :raises ConfigError: an image is smaller than the encoder's minimum resolution (the
        message names ``behaviors.<behavior_name>.network_settings.vis_encode_type``).
    :raises SpaceMismatchError: as :func:`observation_layout`.
    """
    layout = observation_layout(space, action_space)
    key = f"behaviors.{behavior_name}.network_settings.vis_encode_type"
    layout.check(network.vis_encode_type, key)
    return layout


@attrs.frozen(kw_only=True)
class ObservationLayout:
    """Where each part of an observation sits in the flat row the trainers store."""

    parts: tuple[ObservationPart, ...]
    """In row order."""
    keys: tuple[str, ...] | None
    """A ``Dict`` observation's keys in the space's order (the exported policy's inputs);
    ``None`` for a ``Box``."""

    @property
    def size(self) -> int:
        """Width of the row."""
        return sum(p.size for p in self.parts)

    @property
    def vector_size(self) -> int:
        """The vector columns, which come first: what the normaliser standardises."""
        return sum(p.size for p in self.parts if not p.image and not p.mask)

    @property
    def mask(self) -> slice | None:
        """The action mask's columns of the row (right after the vectors); ``None`` without
        one."""
        for part in self.parts:
            if part.mask:
                return slice(part.start, part.start + part.size)
        return None

    @property
    def plain(self) -> bool:
        """Whether the row is what the hidden layers take, as it is: no images to encode and
        no mask to leave out (else :meth:`encoder` builds what turns one into the other)."""
        return not self.images and self.mask is None

    @property
    def images(self) -> tuple[ObservationPart, ...]:
        return tuple(p for p in self.parts if p.image)

    @property
    def byte_size(self) -> int:
        """The ``uint8`` image columns, which come last: the replay buffer keeps them as bytes."""
        return sum(p.size for p in self.images if p.scale != 1.0)

    @property
    def input_names(self) -> tuple[str, ...]:
        """The exported policy's inputs, in the order its ``forward`` takes them."""
        return (BOX_INPUT,) if self.keys is None else self.keys

    # -- from the environment's observations to rows --------------------------------------------

    def rows(self, obs: Any, *, copy: bool = False) -> npt.NDArray[np.float32]:
        """A batch of observations as ``(B, size)`` float32 rows; a view of ``obs`` where
        possible unless ``copy``."""
        if self.keys is None:
            if self.parts[0].one_hot:
                return _columns(self.parts[0], obs, _batch_size(obs))
            x = np.array(obs, dtype=np.float32, copy=copy or None)
            return x.reshape(x.shape[0], -1)
        batch = _batch_size(obs[self.parts[0].key])
        return np.concatenate([_columns(p, obs[p.key], batch) for p in self.parts], axis=1)

    def tensor(self, obs: Any, device: torch.device) -> torch.Tensor:
        """A batch of observations as ``(B, size)`` float32 rows on ``device``, a copy (numpy's
        copy and cast: a third of ``torch.tensor``'s time for a vector step's few rows)."""
        return torch.from_numpy(self.rows(obs, copy=True)).to(device)

    # -- the networks' side ---------------------------------------------------------------------

    def check_mask(self, action_space: spaces.Space[Any]) -> None:
        """Refuse an action mask that is not one entry per action of every discrete branch.

        :raises SpaceMismatchError: naming the ``action_mask`` observation and the fix.
        """
        part = next((p for p in self.parts if p.mask), None)
        if part is None:
            return
        heads = action_heads(action_space)  # the trainer's space: one it takes
        if not heads.branches:
            raise SpaceMismatchError(
                f"observation {MASK_KEY!r} is an action mask, which needs a Discrete, "
                f"MultiDiscrete or hybrid action space, got {action_space}; rename the "
                "observation key if it is no mask"
            )
        actions = sum(heads.branches)
        if part.size != actions:
            raise SpaceMismatchError(
                f"observation {MASK_KEY!r} has {part.size} entries (shape {part.shape}), the "
                f"action space {action_space} has {actions} actions; an action mask holds "
                "one entry per action of every branch (1: allowed, 0: masked)"
            )

    def check(self, kind: VisEncodeType, key: str) -> None:
        """Refuse images smaller than ``kind``'s minimum resolution.

        :param key: the option's path in messages
            (``behaviors.<name>.network_settings.vis_encode_type``).
        :raises ConfigError: naming the image, the minimum and the encoders that fit.
        """
        for part in self.images:
            _, height, width = part.chw
            if too_small(kind, height, width):
                minimum = MIN_RESOLUTION[kind]
                fits = sorted(
                    (m, k) for k, m in MIN_RESOLUTION.items() if not too_small(k, height, width)
                )
                choices = ", ".join(f"{k}: {m}x{m}" for m, k in reversed(fits))
                layout = "channels first" if part.channels_first else "channels last"
                raise ConfigError(
                    [
                        f"{key}: {kind!r} needs images of at least {minimum}x{minimum}, "
                        f"{part.describe()} is {height}x{width} (shape {part.shape}, {layout}); "
                        f"choose a vis_encode_type whose minimum fits ({choices}) or give "
                        "the environment larger images"
                    ]
                )

    def features(self, network: NetworkSettings) -> int:
        """Width of what the hidden layers get: the vectors and ``hidden_units`` per image."""
        return self.vector_size + len(self.images) * network.hidden_units

    def encoder(
        self, network: NetworkSettings, generator: torch.Generator
    ) -> ObservationEncoder | None:
        """A new encoder for the front of one network; ``None`` for a :attr:`plain` row (the
        hidden layers take the row itself).  With a mask and no images it has no weights: it
        only leaves the mask out."""
        return None if self.plain else ObservationEncoder(self, network, generator)

    def normalizer(self, enabled: bool) -> ObservationNormalizer:
        """The observation normaliser: of the whole :attr:`plain` row (as it always was), of
        the vector columns only with images or a mask."""
        if self.plain:
            return ObservationNormalizer((self.size,), enabled=enabled)
        return VectorNormalizer(self.vector_size, enabled=enabled)

    def flattener(self) -> ObservationFlattener:
        """The exported policy's front: its inputs (:attr:`input_names`) to one row."""
        if self.keys is None:
            return ObservationFlattener(())
        return ObservationFlattener(tuple(self.keys.index(str(p.key)) for p in self.parts))


def _batch_size(part: Any) -> int:
    return int(np.shape(part)[0])


def _columns(part: ObservationPart, values: Any, batch: int) -> npt.NDArray[np.float32]:
    if part.one_hot:
        return one_hot(values, part.size, part.first)
    return np.asarray(values, dtype=np.float32).reshape(batch, -1)


def policy_inputs(space: spaces.Space[Any], obs: Any) -> dict[str, npt.NDArray[Any]]:
    """A batch of ``space``'s observations as the exported policy's inputs, by name, in the
    order its ``forward`` takes them: ``{"obs": array}`` for a ``Box``, a ``Dict``'s arrays
    in the space's key order; a ``Discrete``'s as its one-hot rows (:func:`one_hot`)."""
    if isinstance(space, spaces.Dict):
        return {str(k): encoded(space.spaces[k], obs[k]) for k in space.spaces}
    return {BOX_INPUT: encoded(space, obs)}


class ObservationFlattener(nn.Module):
    """The policy's inputs (one per ``Dict`` key, or the ``Box``) to one flat row."""

    def __init__(self, order: tuple[int, ...]) -> None:
        super().__init__()
        self.order = order
        """Which input each part of the row comes from, in row order (empty: one ``Box``)."""

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        if not self.order:
            return obs[0].flatten(1)
        return torch.cat([obs[i].flatten(1) for i in self.order], dim=1)


class ObservationEncoder(nn.Module):
    """The row's vectors as they are, each image through its own encoder, concatenated; the
    action mask left out."""

    def __init__(
        self, layout: ObservationLayout, network: NetworkSettings, generator: torch.Generator
    ) -> None:
        super().__init__()
        self.vector_size = layout.vector_size
        self.images = layout.images
        self.encoders = nn.ModuleList(
            build_encoder(network.vis_encode_type, part.chw, network.hidden_units, generator)
            for part in self.images
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x[:, : self.vector_size]] if self.vector_size else []
        for part, encoder in zip(self.images, self.encoders, strict=True):
            image = x[:, part.start : part.start + part.size].reshape(-1, *part.shape)
            if not part.channels_first:
                image = image.permute(0, 3, 1, 2)
            if part.scale != 1.0:
                image = image * part.scale
            features.append(encoder(image))
        return features[0] if len(features) == 1 else torch.cat(features, dim=1)


class VectorNormalizer(ObservationNormalizer):
    """An :class:`ObservationNormalizer` of the row's first ``width`` columns (the vectors);
    the mask and the images after them pass through unchanged.  Disabled without vectors."""

    def __init__(self, width: int, *, enabled: bool) -> None:
        super().__init__((width,), enabled=enabled and width > 0)
        self.width = width

    def update(self, batch: torch.Tensor) -> None:
        super().update(batch[:, : self.width])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return obs
        vectors = super().forward(obs[:, : self.width])
        return torch.cat([vectors, obs[:, self.width :]], dim=1)
