"""Per-behavior trainer settings: plain attrs classes with ML-Agents' names and defaults.

The runner structures these from YAML with evtrain's cattrs converter (which also turns
``5.0e5``-style floats into ints); here they only declare fields, defaults and range
validators.  Schedules follow ML-Agents: ``"linear"`` decays a value from its initial setting
towards a floor at ``max_steps``, ``"constant"`` keeps it.  When only ``learning_rate_schedule``
is given, ``beta_schedule`` and ``epsilon_schedule`` follow it (ML-Agents'
``check_hyperparam_schedules``).  The networks' settings are in
:mod:`evtrain.trainers.network_settings`, the group trainers' (``poca``, ``mappo``) in
:mod:`evtrain.trainers.group_settings` and ``self_play``'s in
:mod:`evtrain.trainers.self_play_settings` (all re-exported here).
"""

from __future__ import annotations

from typing import Any

import attrs
from attrs import validators as v

from evtrain.evaluation.settings import EvaluationSettings as EvaluationSettings
from evtrain.trainers.group_settings import MAPPOSettings as MAPPOSettings
from evtrain.trainers.group_settings import POCASettings as POCASettings
from evtrain.trainers.group_settings import group_trainer_refusals
from evtrain.trainers.info_stat_settings import InfoStat as InfoStat
from evtrain.trainers.limits import MAX_EXPERIENCES, MAX_STEPS, MAX_UNITS, at_most
from evtrain.trainers.network_settings import ABSENT_WHEN_NONE as _ABSENT_WHEN_NONE
from evtrain.trainers.network_settings import Activation as Activation
from evtrain.trainers.network_settings import MemorySettings as MemorySettings
from evtrain.trainers.network_settings import NetworkSettings as NetworkSettings
from evtrain.trainers.network_settings import VisEncodeType as VisEncodeType
from evtrain.trainers.on_policy_settings import (
    AT_MOST_EPOCHS,
    POSITIVE_INT,
    SCHEDULES,
    OnPolicySettings,
)
from evtrain.trainers.on_policy_settings import Schedule as Schedule
from evtrain.trainers.self_play_settings import LeagueSettings as LeagueSettings
from evtrain.trainers.self_play_settings import SelfPlaySettings as SelfPlaySettings
from evtrain.trainers.stop_settings import StopSettings as StopSettings

_schedule = SCHEDULES
_positive_int = POSITIVE_INT
_unit_open = [v.gt(0.0), v.le(1.0)]
_steps = at_most(MAX_STEPS, "steps")
_experiences = at_most(MAX_EXPERIENCES, "experiences")
_units = at_most(MAX_UNITS, "units")


@attrs.define(kw_only=True)
class PPOSettings(OnPolicySettings):
    """PPO hyperparameters (``trainer_type: ppo``): the on-policy keys
    (:class:`~evtrain.trainers.on_policy_settings.OnPolicySettings`) and ``shared_critic``."""

    shared_critic: bool = attrs.field(default=False, validator=v.instance_of(bool))
    """ML-Agents' option: the value heads sit on the policy's network body (its image encoders
    and hidden layers) instead of a critic network of their own, so the policy and the value
    losses train one body (:class:`~evtrain.trainers.networks.policies.ActorCritic`)."""


@attrs.define(kw_only=True)
class SACSettings:
    """SAC hyperparameters (``trainer_type: sac``)."""

    batch_size: int = attrs.field(default=128, validator=[*_positive_int, _experiences])
    """Transitions sampled from the replay buffer per gradient step."""
    buffer_size: int = attrs.field(default=50000, validator=[*_positive_int, _experiences])
    """Replay buffer capacity in transitions."""
    buffer_init_steps: int = attrs.field(
        default=0, validator=[v.instance_of(int), v.ge(0), _experiences]
    )
    """Environment steps of uniformly random actions before the policy acts and learning
    starts."""
    learning_rate: float = attrs.field(default=3.0e-4, validator=v.gt(0.0))
    """Adam step size of the policy, the Q networks and the entropy coefficient."""
    learning_rate_schedule: Schedule = attrs.field(default="constant", validator=_schedule)
    tau: float = attrs.field(default=0.005, validator=_unit_open)
    """Polyak factor of the target Q networks' soft update."""
    steps_per_update: float = attrs.field(default=1.0, validator=v.gt(0.0))
    """Environment steps (summed over environments) per gradient step."""
    init_entcoef: float = attrs.field(default=1.0, validator=v.gt(0.0))
    """Initial entropy coefficient (alpha), tuned automatically from there."""
    target_entropy: float | None = attrs.field(default=None)
    """Entropy the coefficient is tuned towards; ``None`` means ``-action_dim``."""
    save_replay_buffer: bool = attrs.field(default=False, validator=v.instance_of(bool))
    """Include the replay buffer in ``state_dict`` so a resumed run keeps its experience."""
    max_grad_norm: float | None = attrs.field(default=None)
    """Optional global gradient-norm clip (``None``: no clipping, as in the SAC paper)."""
    reward_signal_steps_per_update: float = attrs.field(
        default=attrs.Factory(lambda self: self.steps_per_update, takes_self=True),
        validator=v.gt(0.0),
    )
    """Environment steps (summed over environments) per update of the intrinsic reward
    providers' models (curiosity, rnd, gail), each on its own replay minibatch (ML-Agents';
    default ``steps_per_update``).  Without intrinsic reward providers it has no effect."""


@attrs.define(kw_only=True)
class RewardProviderSettings:
    """One reward provider: the environment's own (``extrinsic``), or the base of an intrinsic
    one (:class:`GAILSettings`, :class:`CuriositySettings`, :class:`RNDSettings`)."""

    gamma: float = attrs.field(default=0.99, validator=[v.ge(0.0), v.le(1.0)])
    """Discount factor of this provider's value head and advantages."""
    strength: float = attrs.field(default=1.0, validator=v.ge(0.0))
    """Factor applied to the provider's reward before learning."""
    network_settings: NetworkSettings | None = attrs.field(
        default=None, metadata={"absent_when_none": True}
    )
    """ML-Agents: the shape of the provider's model.  ``hidden_units`` and ``num_layers`` shape
    the encoder of curiosity, rnd and gail (see :func:`provider_hidden_layers`); the other keys
    and ``extrinsic``'s (which has no model) are accepted without effect.  ``None`` (absent):
    ``encoding_size`` units in two layers."""


DEFAULT_ENCODING_SIZE = 64
"""Width of a provider model's layers when neither ``encoding_size`` nor ``network_settings``
says (ML-Agents' ``encoding_size`` default before ``network_settings`` replaced it)."""


def provider_hidden_layers(settings: RewardProviderSettings) -> list[int]:
    """The widths of a provider model's hidden layers, ML-Agents' rule: ``network_settings``'s
    ``num_layers`` of ``hidden_units`` when it is given (``encoding_size`` is then ignored),
    else two layers of ``encoding_size``."""
    network = settings.network_settings
    if network is not None:
        return [network.hidden_units] * network.num_layers
    encoding_size = getattr(settings, "encoding_size", DEFAULT_ENCODING_SIZE)
    return [encoding_size, encoding_size]


@attrs.define(kw_only=True)
class GAILSettings(RewardProviderSettings):
    """Generative adversarial imitation learning (Ho & Ermon 2016): a discriminator learns to
    tell the demonstrations from the policy's experience, and the reward is how much a
    transition looks like a demonstration's."""

    demo_path: str = attrs.field(validator=v.instance_of(str))
    """A demonstration file written by ``evtrain record`` (``.npz``), or a folder of them."""
    encoding_size: int = attrs.field(
        default=DEFAULT_ENCODING_SIZE, validator=[*_positive_int, _units]
    )
    """Width of the discriminator's two layers (when ``network_settings`` is absent)."""
    learning_rate: float = attrs.field(default=3.0e-4, validator=v.gt(0.0))
    """Adam step size of the discriminator (constant)."""
    use_actions: bool = attrs.field(default=False, validator=v.instance_of(bool))
    """The discriminator sees the action beside the observation."""
    use_vail: bool = attrs.field(default=False, validator=v.instance_of(bool))
    """A variational information bottleneck in the discriminator (VAIL, Peng et al. 2018)."""


@attrs.define(kw_only=True)
class CuriositySettings(RewardProviderSettings):
    """The intrinsic curiosity module (Pathak et al. 2017): the reward is the error of a
    forward model predicting the encoding of the next observation."""

    encoding_size: int = attrs.field(
        default=DEFAULT_ENCODING_SIZE, validator=[*_positive_int, _units]
    )
    """Width of the state encoder's two layers, and so of the encoding (when
    ``network_settings`` is absent)."""
    learning_rate: float = attrs.field(default=3.0e-4, validator=v.gt(0.0))
    """Adam step size of the curiosity model (constant)."""


@attrs.define(kw_only=True)
class RNDSettings(RewardProviderSettings):
    """Random network distillation (Burda et al. 2018): the reward is the error of a trained
    predictor of a fixed random network's output."""

    encoding_size: int = attrs.field(
        default=DEFAULT_ENCODING_SIZE, validator=[*_positive_int, _units]
    )
    """Width of both networks' two layers, and so of their output (when ``network_settings``
    is absent)."""
    learning_rate: float = attrs.field(default=1.0e-4, validator=v.gt(0.0))
    """Adam step size of the predictor (constant)."""


IntrinsicSettings = GAILSettings | CuriositySettings | RNDSettings
"""The settings of a reward provider with a model of its own."""


def absent_when_none(attribute: attrs.Attribute[Any], value: object) -> bool:
    """An ``attrs.asdict`` filter: false for an optional setting that is not configured (a
    reward provider, ``behavioral_cloning``), so settings without them read as they did before
    there were any."""
    return value is not None or not attribute.metadata.get("absent_when_none", False)


@attrs.define(kw_only=True)
class RewardProviders:
    """The reward providers of a behavior; ``extrinsic`` is always there (strength 0 trains on
    the intrinsic reward providers alone), ``gail``, ``curiosity`` and ``rnd`` when configured."""

    extrinsic: RewardProviderSettings = attrs.field(factory=RewardProviderSettings)
    curiosity: CuriositySettings | None = attrs.field(default=None, metadata=_ABSENT_WHEN_NONE)
    rnd: RNDSettings | None = attrs.field(default=None, metadata=_ABSENT_WHEN_NONE)
    gail: GAILSettings | None = attrs.field(default=None, metadata=_ABSENT_WHEN_NONE)

    @property
    def intrinsic(self) -> dict[str, IntrinsicSettings]:
        """The configured intrinsic reward providers by YAML key, in ML-Agents' order (gail,
        curiosity, rnd): the order of their value heads."""
        configured = {"gail": self.gail, "curiosity": self.curiosity, "rnd": self.rnd}
        return {name: s for name, s in configured.items() if s is not None}


@attrs.define(kw_only=True)
class BehavioralCloningSettings:
    """Behavioral cloning alongside reinforcement learning (ML-Agents' ``behavioral_cloning``):
    the policy is also trained to take the demonstrations' actions."""

    demo_path: str = attrs.field(validator=v.instance_of(str))
    """A demonstration file written by ``evtrain record`` (``.npz``), or a folder of them."""
    steps: int = attrs.field(default=0, validator=[v.instance_of(int), v.ge(0)])
    """Steps over which the cloning's learning rate decays linearly to 0; 0 keeps it
    constant for the whole run."""
    strength: float = attrs.field(default=1.0, validator=v.ge(0.0))
    """The cloning's learning rate relative to the trainer's ``learning_rate``."""
    samples_per_update: int = attrs.field(default=0, validator=[v.instance_of(int), v.ge(0)])
    """Demonstration samples per epoch of an update at most; 0: all of them."""
    num_epoch: int | None = attrs.field(
        default=None, validator=v.optional([*_positive_int, AT_MOST_EPOCHS])
    )
    """Passes over the (sampled) demonstrations per update; ``None``: 3 (ML-Agents')."""
    batch_size: int | None = attrs.field(default=None, validator=v.optional(_positive_int))
    """Demonstration samples per gradient step; ``None``: the trainer's ``batch_size``."""


def _default_hyperparameters(instance: Any) -> object:
    kinds = {"sac": SACSettings, "poca": POCASettings, "mappo": MAPPOSettings}
    return kinds.get(instance.trainer_type, PPOSettings)()


def _attrs_instance(instance: object, attribute: attrs.Attribute[object], value: object) -> None:
    if not attrs.has(type(value)):
        raise TypeError(
            f"{attribute.name} must be an attrs settings instance such as PPOSettings, "
            f"got {type(value).__name__}"
        )


@attrs.define(kw_only=True)
class TrainerSettings:
    """Everything that configures the training of one behavior."""

    trainer_type: str = attrs.field(default="ppo", validator=v.instance_of(str))
    """Key of :data:`~evtrain.trainers.registry.TRAINER_TYPES` (``"ppo"``, ``"sac"``,
    ``"poca"``, ``"mappo"``, or a plugin's)."""
    hyperparameters: object = attrs.field(
        default=attrs.Factory(_default_hyperparameters, takes_self=True),
        validator=_attrs_instance,
    )
    """An instance of the settings class registered for ``trainer_type`` (typed ``object``
    because plugins register their own classes; each trainer checks it gets its own)."""
    network_settings: NetworkSettings = attrs.field(factory=NetworkSettings)
    reward_signals: RewardProviders = attrs.field(factory=RewardProviders)
    behavioral_cloning: BehavioralCloningSettings | None = attrs.field(
        default=None, metadata=_ABSENT_WHEN_NONE
    )
    """Train the policy on demonstrations too (PPO and SAC)."""
    self_play: SelfPlaySettings | None = attrs.field(default=None, metadata=_ABSENT_WHEN_NONE)
    """Play against snapshots of the behavior's own policy (:mod:`evtrain.trainers.ghost`);
    needs an environment whose agents of this behavior form two teams."""
    evaluation: EvaluationSettings | None = attrs.field(default=None, metadata=_ABSENT_WHEN_NONE)
    """evtrain's own: evaluate the deterministic policy every ``evaluation.every`` steps on
    environments of its own, and keep the best model (:mod:`evtrain.run.evaluation.evaluations`)."""
    max_steps: int = attrs.field(default=500000, validator=[*_positive_int, _steps])
    """Environment steps (summed over environments) after which training stops."""
    time_horizon: int = attrs.field(default=64, validator=[*_positive_int, _steps])
    """Steps per environment after which a trajectory is cut and bootstrapped from the value
    of its last observation (PPO)."""
    summary_freq: int = attrs.field(default=50000, validator=[*_positive_int, _steps])
    """Steps between two ``stats`` events."""
    checkpoint_interval: int = attrs.field(default=500000, validator=[*_positive_int, _steps])
    """Steps between two checkpoints (written by the runner)."""
    keep_checkpoints: int = attrs.field(default=5, validator=_positive_int)
    """Most recent checkpoints kept on disk."""
    even_checkpoints: bool = attrs.field(default=False, validator=v.instance_of(bool))
    """ML-Agents: space ``keep_checkpoints`` checkpoints evenly over ``max_steps`` instead of
    every ``checkpoint_interval`` steps (see :attr:`checkpoint_every`)."""
    init_path: str | None = attrs.field(default=None, validator=v.optional(v.instance_of(str)))
    """ML-Agents: start this behavior from the weights of a checkpoint (a ``.pt`` file, or a
    run folder or behavior folder holding ``checkpoint.pt``), at step 0, like
    ``checkpoint_settings.initialize_from`` does for every behavior."""
    threaded: bool = attrs.field(default=False, validator=v.instance_of(bool))
    """ML-Agents: step the environments while the model updates, on a thread of its own
    (:mod:`evtrain.trainers.threaded`); the environments act with the networks of before the
    update in flight.  Refused in a distributed run."""
    on_nonfinite: str = attrs.field(default="stop", validator=v.in_(("stop", "skip")))
    """What a NaN or infinite reward, observation, loss or gradient does
    (:mod:`evtrain.trainers.finite`): ``stop`` the run with an error naming it, the behavior
    and the step, or ``skip`` the update it would enter and count it
    (``Policy/Non-finite Updates Skipped``)."""
    info_stats: dict[str, InfoStat] | None = attrs.field(default=None, metadata=_ABSENT_WHEN_NONE)
    """Keys of the environment's ``info`` recorded as statistics, each with its aggregation
    (:mod:`evtrain.trainers.info_stat_settings`); ``None``: none."""
    stop: StopSettings | None = attrs.field(default=None, metadata=_ABSENT_WHEN_NONE)
    """Conditions that stop the run early (:mod:`evtrain.trainers.stop_settings`)."""

    @property
    def checkpoint_every(self) -> int:
        """Steps between two checkpoints: ``checkpoint_interval``, or with
        ``even_checkpoints`` ``max_steps // keep_checkpoints`` (ML-Agents' rule; at least 1)."""
        if self.even_checkpoints:
            return max(1, self.max_steps // self.keep_checkpoints)
        return self.checkpoint_interval

    def __attrs_post_init__(self) -> None:
        memory = self.network_settings.memory
        batch_size = getattr(self.hyperparameters, "batch_size", None)
        if (
            memory is not None
            and isinstance(batch_size, int)
            and memory.sequence_length > batch_size
        ):
            # ML-Agents' rule: a minibatch holds at least one whole sequence
            raise ValueError(
                f"network_settings: memory.sequence_length ({memory.sequence_length}) must "
                f"not exceed hyperparameters.batch_size ({batch_size}); lower "
                "sequence_length or raise batch_size"
            )
        if memory is not None and self.threaded and self.trainer_type == "sac":
            raise ValueError(
                "threaded: true with a recurrent SAC (network_settings.memory) is not "
                "supported by evtrain yet: its critics step along with the environments; set "
                "threaded: false or remove memory"
            )
        if memory is not None and self.self_play is not None:
            raise ValueError(
                "self_play: the opponents of a recurrent policy (network_settings.memory) "
                "are not supported by evtrain yet; remove memory or self_play"
            )
        if memory is not None and getattr(self.hyperparameters, "shared_critic", False) is True:
            raise ValueError(
                "hyperparameters: shared_critic: true with network_settings.memory is not "
                "supported by evtrain yet (the policy and the critic carry memories of their "
                "own); set shared_critic: false or remove memory"
            )
        if memory is not None and self.behavioral_cloning is not None:
            raise ValueError(
                "behavioral_cloning: cloning a recurrent policy (network_settings.memory) is "
                "not supported by evtrain yet; remove behavioral_cloning or memory"
            )
        group_trainer_refusals(
            self.trainer_type,
            memory=memory,
            intrinsic=self.reward_signals.intrinsic,
            behavioral_cloning=self.behavioral_cloning,
        )
