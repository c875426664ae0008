"""Drive a build with the REAL mlagents-envs 0.28 client; runs in that package's own venv.

``python mlagents_driver.py PLAN_JSON`` prints one JSON report: the behavior specs the client
read, what each step gave per behavior, the stats the stats side channel collected, and the
error if the client raised one.  The plan: ``build``, ``port``, ``steps``, ``policy`` (``right``:
discrete action 2 everywhere; ``random``: the action spec's random actions), ``args`` (the
build's extra arguments), ``log_folder``, ``engine`` (engine configuration keyword arguments) and
``parameters`` (environment parameters, name -> float).  Given a JSON list of plans, it drives
them one after another (a build each, the client imported once) and prints the list of reports.

This file imports only mlagents_envs, numpy and the standard library: it is not part of evtrain.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from typing import Any

import numpy as np
from mlagents_envs.base_env import ActionTuple  # type: ignore[import-not-found]
from mlagents_envs.environment import UnityEnvironment  # type: ignore[import-not-found]
from mlagents_envs.side_channel.engine_configuration_channel import EngineConfigurationChannel  # type: ignore[import-not-found]
from mlagents_envs.side_channel.environment_parameters_channel import (  # type: ignore[import-not-found]
    EnvironmentParametersChannel,
)
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel  # type: ignore[import-not-found]


def describe_spec(spec: Any) -> dict[str, Any]:
    return {
        "observations": [
            {
                "shape": list(obs.shape),
                "dimension_property": [int(d.value) for d in obs.dimension_property],
                "observation_type": int(obs.observation_type.value),
                "name": obs.name,
            }
            for obs in spec.observation_specs
        ],
        "continuous": spec.action_spec.continuous_size,
        "branches": list(spec.action_spec.discrete_branches),
    }


def describe_steps(decisions: Any, terminals: Any) -> dict[str, Any]:
    return {
        "decision_ids": decisions.agent_id.tolist(),
        "decision_rewards": decisions.reward.tolist(),
        "decision_group_ids": np.asarray(decisions.group_id).tolist(),
        "decision_group_rewards": decisions.group_reward.tolist(),
        "decision_obs": [
            [list(o.shape), float(o.sum()), float(o.min(initial=0)), float(o.max(initial=0))]
            for o in decisions.obs
        ],
        "action_mask": None
        if decisions.action_mask is None
        else [m.astype(int).tolist() for m in decisions.action_mask],
        "terminal_ids": terminals.agent_id.tolist(),
        "terminal_rewards": terminals.reward.tolist(),
        "interrupted": terminals.interrupted.tolist(),
        "terminal_group_ids": np.asarray(terminals.group_id).tolist(),
        "terminal_group_rewards": terminals.group_reward.tolist(),
    }


def actions_for(spec: Any, count: int, policy: str) -> ActionTuple:
    if policy == "random":
        return spec.action_spec.random_action(count)
    action = spec.action_spec.empty_action(count)
    if spec.action_spec.discrete_size:
        action.discrete[:] = 2
    return action


def run(plan: dict[str, Any], report: dict[str, Any]) -> None:
    engine, parameters, stats = (
        EngineConfigurationChannel(),
        EnvironmentParametersChannel(),
        StatsSideChannel(),
    )
    engine.set_configuration_parameters(**plan.get("engine", {}))
    for key, value in plan.get("parameters", {}).items():
        parameters.set_float_parameter(key, value)
    env = UnityEnvironment(
        file_name=plan["build"],
        base_port=plan["port"],
        no_graphics=True,
        timeout_wait=30,
        additional_args=plan.get("args", []),
        side_channels=[engine, parameters, stats],
        log_folder=plan["log_folder"],
    )
    report["stage"] = "connected"
    try:
        try:
            env.reset()
        finally:  # a reset that fails to decode the steps has read the specs already
            report["specs"] = {name: describe_spec(s) for name, s in env.behavior_specs.items()}
        report["steps"] = []
        for _ in range(plan["steps"]):
            step: dict[str, Any] = {}
            for name, spec in env.behavior_specs.items():
                decisions, terminals = env.get_steps(name)
                step[name] = describe_steps(decisions, terminals)
                env.set_actions(name, actions_for(spec, len(decisions), plan["policy"]))
            report["steps"].append(step)
            env.step()
        timed = plan.get("time_steps", 0)
        if timed:  # the benchmark: exchanges alone, actions made beforehand
            name = next(iter(env.behavior_specs))
            count = len(env.get_steps(name)[0])
            action = actions_for(env.behavior_specs[name], count, plan["policy"])
            started = time.perf_counter()
            for _ in range(timed):
                env.set_actions(name, action)
                env.step()
                env.get_steps(name)
            report["seconds"] = time.perf_counter() - started
        collected = stats.get_and_reset_stats()
        report["stats"] = {k: [[v, m.value] for v, m in vals] for k, vals in collected.items()}
    finally:
        env.close()
        report["stage"] = "closed"


def drive(plan: dict[str, Any]) -> dict[str, Any]:
    report: dict[str, Any] = {"stage": "started"}
    try:
        run(plan, report)
    except Exception as error:  # the report says what the client raised
        report["error"] = f"{type(error).__name__}: {error}"
        report["traceback"] = traceback.format_exc()
    return report


def main() -> None:
    plans = json.loads(sys.argv[1])
    if isinstance(plans, list):
        print(json.dumps([drive(plan) for plan in plans]))
    else:
        print(json.dumps(drive(plans)))


if __name__ == "__main__":
    main()
