"""The Unity side's simulation loop: an Academy stepping agents, as com.unity.ml-agents does.

One Academy step, as ``Academy.EnvironmentStep`` orders it: agents whose decision period has come
request a decision (``DecisionRequester``), every agent's step count grows, the requesting agents'
infos are batched, the batch is exchanged with the trainer (only when some agent requested), and
every agent acts on its latest action (``TakeActionsBetweenDecisions``).  An agent's episode ends
through :meth:`Academy.end`: its terminal info goes into the next batch at once, with the
observation after its last action, and it starts a new episode under a NEW id (Unity's agent id on
the wire is the episode id, ``EpisodeIdCounter``).  Reaching ``max_step`` ends an episode as
``max_step_reached`` (interrupted); an agent that leaves the scene sends a terminal info too
(``DoneReason.Disabled``).  The actions of a reply are matched to the requesting agents in the
order their infos were sent, as ``RpcCommunicator`` matches them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from evtrain.unity import schema


class Body:
    """One agent in the scene, across its episodes."""

    def __init__(self, behavior: str, *, period: int = 1, offset: int = 0, group: int = 0) -> None:
        self.behavior = behavior
        self.period = period
        """Decision period: the agent requests a decision every ``period`` Academy steps."""
        self.offset = offset
        self.group_id = group
        self.episode_id = 0
        self.steps = 0
        self.reward = 0.0
        self.group_reward = 0.0
        self.action: Any = None
        """The latest ``AgentActionProto`` for this agent; acted on each step until replaced."""
        self.active = True
        self.state: Any = None
        """The scenario's own state of this agent (position, ...)."""
        self.index = 0
        """The agent's place among its scenario's bodies."""


class Scenario:
    """A scene: its behaviors and its agents' dynamics.  Subclasses override the hooks."""

    max_step = 0
    """Steps after which an episode ends as interrupted (0: never, as Unity's MaxStep)."""

    def __init__(self, options: dict[str, str], rng: random.Random) -> None:
        self.options = options
        self.rng = rng
        self.seed = 0
        """The seed the trainer gave in the handshake (``seed + worker id`` from evtrain)."""
        self.academy: Academy

    def behaviors(self) -> list[Any]:
        """The ``BrainParametersProto`` of each behavior (full names, ``?team=N`` included)."""
        raise NotImplementedError

    def bodies(self) -> list[Body]:
        """Every agent the scene will ever hold (late ones start inactive)."""
        raise NotImplementedError

    def begin(self, body: Body) -> None:
        """``OnEpisodeBegin``."""

    def act(self, body: Body, action: Any) -> None:
        """``OnActionReceived``: move, reward (``body.reward +=``), maybe :meth:`Academy.end`."""

    def observe(self, body: Body) -> Sequence[Any]:
        """The agent's ``ObservationProto``s, in its sensors' order."""
        raise NotImplementedError

    def mask(self, body: Body) -> Sequence[bool] | None:
        """``WriteDiscreteActionMask``: True = the action is masked off."""
        return None

    def frame(self, step: int) -> None:
        """Once per Academy step, before decisions: agents appear, leave, groups end."""

    def stats(self) -> list[bytes]:
        """Stats side channel messages to send with this step's batch."""
        return []


class Academy:
    """Steps a :class:`Scenario` and batches its agents' infos, as Unity's Academy does."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        scenario.academy = self
        self.names = [params.brain_name for params in scenario.behaviors()]
        self.params = {params.brain_name: params for params in scenario.behaviors()}
        self.unsent = set(self.names)
        self.bodies = scenario.bodies()
        for index, body in enumerate(self.bodies):
            body.index = index
        self.step_count = 0
        self.next_episode = 1
        self.batch: dict[str, list[Any]] = {name: [] for name in self.names}
        self.requesting: dict[str, list[Body]] = {name: [] for name in self.names}

    def reset(self) -> None:
        """A RESET command: every active agent starts a new episode; nothing is pending."""
        self.step_count = 0
        for name in self.names:
            self.batch[name].clear()
            self.requesting[name].clear()
        for body in self.bodies:
            if body.active:
                self.start(body)

    def start(self, body: Body) -> None:
        body.episode_id = self.next_episode
        self.next_episode += 1
        body.steps = 0
        body.reward = body.group_reward = 0.0
        body.action = None
        self.scenario.begin(body)

    def apply(self, rl_input: Any) -> None:
        """The reply's actions, matched to the agents that requested decisions, in order."""
        for name, actions in rl_input.agent_actions.items():
            waiting = self.requesting.get(name, [])
            for body, action in zip(waiting, actions.value, strict=False):
                body.action = action
        for waiting in self.requesting.values():
            waiting.clear()

    def act(self) -> None:
        """``AgentAct``: every active agent acts on its latest action; max steps end episodes."""
        max_step = self.scenario.max_step
        for body in self.bodies:
            if not body.active:
                continue
            if body.action is not None:
                self.scenario.act(body, body.action)
            if body.active and max_step and body.steps >= max_step:
                self.end(body, interrupted=True)

    def end(self, body: Body, *, interrupted: bool = False, leave: bool = False) -> None:
        """``NotifyAgentDone``: the terminal info now, then a new episode (unless it leaves)."""
        self.batch[body.behavior].append(self.info(body, done=True, interrupted=interrupted))
        if leave:
            body.active = False
        else:
            self.start(body)

    def enter(self, body: Body) -> None:
        """An agent appears in the scene."""
        body.active = True
        self.start(body)

    def collect(self) -> bool:
        """One Academy step's decision requests; True when there is a batch to send."""
        self.scenario.frame(self.step_count)
        for body in self.bodies:
            if body.active and self.step_count % body.period == body.offset % body.period:
                self.batch[body.behavior].append(self.info(body))
                self.requesting[body.behavior].append(body)
        self.step_count += 1
        for body in self.bodies:
            if body.active:
                body.steps += 1
        return any(self.batch.values())

    def info(self, body: Body, *, done: bool = False, interrupted: bool = False) -> Any:
        info = schema.AgentInfoProto(
            reward=body.reward,
            done=done,
            max_step_reached=interrupted,
            id=body.episode_id,
            group_id=body.group_id,
            group_reward=body.group_reward,
        )
        info.observations.extend(self.scenario.observe(body))
        if not done:
            mask = self.scenario.mask(body)
            if mask is not None:
                info.action_mask.extend(mask)
        body.reward = body.group_reward = 0.0
        return info

    def output(self, side_channel: bytes) -> Any:
        """The batch as a ``UnityOutputProto``, with the parameters of newly seen behaviors."""
        output = schema.UnityOutputProto()
        rl_output = output.rl_output
        for name in self.names:
            infos = self.batch[name]
            if not infos and name in self.unsent:
                continue  # a behavior is subscribed when its first agent asks
            rl_output.agentInfos[name].value.extend(infos)
            if name in self.unsent:
                self.unsent.discard(name)
                output.rl_initialization_output.brain_parameters.append(self.params[name])
            infos.clear()
        rl_output.side_channel = side_channel
        return output
