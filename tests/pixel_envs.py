"""CartPole seen through pixels, for tests of image observations (``vis_encode_type``).

``env_id: tests.pixel_envs:pixel_cartpole`` is CartPole-v1 whose observation is a small
``uint8`` image, ``H x W x 3`` (40 x 40 by default: every encoder's minimum resolution fits),
drawn with numpy (no pygame, no rendering backend); ``tests.pixel_envs:pixel_vector_cartpole``
is a ``Dict`` of that image and a vector.  Both take ``size`` (the image's side),
``continuous`` (a ``Box(-1, 1, (1,))`` action, pushing right when positive: for SAC) and
CartPole's own keyword arguments.

The image's channels: 0 the cart, 1 the pole, 2 the cart and pole one step earlier.  The
third channel shows the motion, so one image holds what CartPole's state does (positions and,
by difference, velocities).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import onnx
import torch

from evtrain import Bus, RunOptions, StatsReporter
from evtrain.run.checkpoints.checkpoint import load_checkpoint
from evtrain.run.environments.envs import make_envs
from evtrain.trainers import PPOTrainer, SACTrainer, Trainer
from evtrain.trainers.networks.encoders import VisEncodeType

X_LIMIT = 2.4
"""CartPole's cart position at which an episode ends: the image's left and right edges."""

Image = npt.NDArray[np.uint8]


class PixelObservation(gym.ObservationWrapper[Any, Any, Any]):
    """CartPole's state ``(x, x_dot, theta, theta_dot)`` drawn as a ``size x size x 3`` image
    (with ``vector``: a ``Dict`` of the image and the velocities ``(x_dot, theta_dot)``)."""

    def __init__(self, env: gym.Env[Any, Any], size: int, *, vector: bool = False) -> None:
        super().__init__(env)
        if size < 8:
            raise ValueError(f"size must be at least 8 pixels, got {size}")
        self.size = size
        self.vector = vector
        image = gym.spaces.Box(0, 255, (size, size, 3), np.uint8)
        if vector:
            velocities = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
            self.observation_space = gym.spaces.Dict({"image": image, "vector": velocities})
        else:
            self.observation_space = image
        self._previous: Image | None = None
        # Pixels along the pole: enough samples that the drawn line has no gaps.
        self._pole_length = 0.45 * size
        self._along = np.linspace(0.0, 1.0, 2 * size)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._previous = None
        return super().reset(**kwargs)

    def observation(self, observation: Any) -> Any:
        x, x_dot, theta, theta_dot = (float(v) for v in observation)
        frame = self._draw(x, theta)
        image = np.zeros((self.size, self.size, 3), dtype=np.uint8)
        image[..., :2] = frame
        previous = frame if self._previous is None else self._previous
        image[..., 2] = previous.max(axis=-1)
        self._previous = frame
        if self.vector:
            return {"image": image, "vector": np.array([x_dot, theta_dot], dtype=np.float32)}
        return image

    def _draw(self, x: float, theta: float) -> Image:
        """The cart (channel 0) and the pole (channel 1) at cart position ``x``, angle ``theta``."""
        size = self.size
        frame = np.zeros((size, size, 2), dtype=np.uint8)
        centre = (np.clip(x, -X_LIMIT, X_LIMIT) + X_LIMIT) / (2 * X_LIMIT) * (size - 1)
        cart_row = int(size * 0.8)
        half = max(2, size // 10)
        middle = int(np.rint(centre))
        left, right = middle - half, middle + half + 1
        frame[cart_row : cart_row + max(2, size // 16), max(left, 0) : max(right, 0), 0] = 255
        # The pole, from the cart's top centre: upright at theta 0, leaning right when positive.
        cols = np.rint(centre + self._along * self._pole_length * np.sin(theta)).astype(int)
        rows = np.rint(cart_row - self._along * self._pole_length * np.cos(theta)).astype(int)
        inside = (cols >= 0) & (cols < size) & (rows >= 0) & (rows < size)
        frame[rows[inside], cols[inside], 1] = 255
        return frame


class ContinuousPush(gym.ActionWrapper[Any, Any, Any]):
    """A ``Box(-1, 1, (1,))`` action for CartPole: push right when positive, else left."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def action(self, action: Any) -> int:
        return int(np.asarray(action).reshape(-1)[0] > 0.0)


def _make(size: int, continuous: bool, vector: bool, kwargs: dict[str, Any]) -> gym.Env[Any, Any]:
    env: gym.Env[Any, Any] = PixelObservation(
        gym.make("CartPole-v1", **kwargs), size, vector=vector
    )
    return ContinuousPush(env) if continuous else env


def pixel_cartpole(size: int = 40, continuous: bool = False, **kwargs: Any) -> gym.Env[Any, Any]:
    """CartPole-v1 observed as a ``size x size x 3`` ``uint8`` image
    (``env_id: tests.pixel_envs:pixel_cartpole``)."""
    return _make(size, continuous, False, kwargs)


def pixel_vector_cartpole(
    size: int = 40, continuous: bool = False, **kwargs: Any
) -> gym.Env[Any, Any]:
    """CartPole-v1 observed as a ``Dict``: ``image`` (as :func:`pixel_cartpole`'s) and
    ``vector``, the cart's and the pole's velocities (``env_id:
    tests.pixel_envs:pixel_vector_cartpole``)."""
    return _make(size, continuous, True, kwargs)


def options(
    tmp_path: Path, trainer: str, kind: VisEncodeType, env_id: str, **env_kwargs: Any
) -> dict[str, Any]:
    """A 64-step run of 2 environments, a summary every 32 steps, tiny networks."""
    if trainer == "ppo":
        hyperparameters: dict[str, Any] = {"batch_size": 16, "buffer_size": 32, "num_epoch": 1}
    else:
        hyperparameters = {
            "batch_size": 8,
            "buffer_size": 200,
            "buffer_init_steps": 32,
            "steps_per_update": 4,
        }
        env_kwargs["continuous"] = True
    return {
        "behaviors": {
            "Pixel": {
                "trainer_type": trainer,
                "hyperparameters": hyperparameters,
                "network_settings": {
                    "hidden_units": 8,
                    "num_layers": 1,
                    "normalize": True,
                    "vis_encode_type": kind,
                },
                "max_steps": 64,
                "time_horizon": 16,
                "summary_freq": 32,
            }
        },
        "env_settings": {
            "env_id": f"tests.pixel_envs:{env_id}",
            "env_kwargs": env_kwargs,
            "num_envs": 2,
            "seed": 1,
        },
        "checkpoint_settings": {"run_id": "pixels", "results_dir": str(tmp_path)},
    }


def trained_policy(run: dict[str, Any], tmp_path: Path) -> torch.nn.Module:
    """The policy of the run's final checkpoint, in a trainer built afresh."""
    run_options = RunOptions.from_dict(copy.deepcopy(run))
    settings = run_options.behaviors["Pixel"]
    trainer_cls = TRAINERS[settings.trainer_type]
    with Bus() as bus:
        trainer = trainer_cls(
            "Pixel", settings, make_envs(run_options.env_settings), StatsReporter(bus, "P"), seed=0
        )
    trainer.load_weights(load_checkpoint(tmp_path / "pixels" / "Pixel" / "checkpoint.pt"))
    trainer.envs.close()
    policy: torch.nn.Module = trainer.policy_module()
    return policy


def frames(env_kwargs: dict[str, Any], n: int, *, vector: bool = False) -> Any:
    """``n`` observations of a pixel CartPole played at random, stacked as a batch."""
    env = (pixel_vector_cartpole if vector else pixel_cartpole)(**env_kwargs)
    obs, _ = env.reset(seed=7)
    seen = [obs]
    while len(seen) < n:
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        seen.append(env.reset()[0] if terminated or truncated else obs)
    if vector:
        return {key: np.stack([o[key] for o in seen]) for key in seen[0]}
    return np.stack(seen)


def input_shapes(path: Path) -> list[tuple[str, list[int | str]]]:
    return [
        (i.name, [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim])
        for i in onnx.load(path).graph.input
    ]


def torch_actions(policy: torch.nn.Module, obs: Any) -> np.ndarray:
    parts = obs.values() if isinstance(obs, dict) else [obs]
    with torch.no_grad():
        out: torch.Tensor = policy(*(torch.as_tensor(x, dtype=torch.float32) for x in parts))
    return out.numpy()


TRAINERS: dict[str, type[Trainer]] = {"ppo": PPOTrainer, "sac": SACTrainer}
