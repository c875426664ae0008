"""An exchange's agent data decoded: float and PNG observations, masks, groups, ends."""

from __future__ import annotations

import numpy as np
import pytest

from evtrain.errors import UnityDataError
from evtrain.unity.specs import ActionSpec, BehaviorSpec, ObservationSpec, split_behavior_name
from evtrain.unity.steps import steps_from_proto
from tests.unity.fake_build import agent, png, visual

VECTOR = ObservationSpec((2,), (1,), 0, "vector")


def _spec(*obs: ObservationSpec, branches: tuple[int, ...] = ()) -> BehaviorSpec:
    return BehaviorSpec(obs, ActionSpec(0 if branches else 1, branches))


def test_decisions_and_terminals_are_split_with_their_fields() -> None:
    infos = [
        agent(1, [[1.0, 2.0]], reward=0.5, group=3, group_reward=2.0),
        agent(2, [[3.0, 4.0]], reward=-1.0, done=True, max_step=True),
        agent(5, [[5.0, 6.0]], reward=1.0, done=True),
    ]
    decisions, terminals = steps_from_proto(infos, _spec(VECTOR), "B")
    assert decisions.agent_id.tolist() == [1]
    assert decisions.obs[0].tolist() == [[1.0, 2.0]]
    assert (decisions.reward.tolist(), decisions.group_id.tolist()) == ([0.5], [3])
    assert decisions.group_reward.tolist() == [2.0]
    assert decisions.action_mask is None
    assert terminals.agent_id.tolist() == [2, 5]
    assert terminals.interrupted.tolist() == [True, False]
    assert terminals.obs[0].tolist() == [[3.0, 4.0], [5.0, 6.0]]
    assert terminals.reward.tolist() == [-1.0, 1.0]


def test_action_masks_come_per_branch_true_meaning_masked_off() -> None:
    infos = [
        agent(1, [[0.0, 0.0]], mask=[True, False, False, False, True]),
        agent(2, [[0.0, 0.0]]),  # no mask: everything allowed
    ]
    decisions, _ = steps_from_proto(infos, _spec(VECTOR, branches=(3, 2)), "B")
    assert decisions.action_mask is not None
    assert [m.tolist() for m in decisions.action_mask] == [
        [[True, False, False], [False, False, False]],
        [[False, True], [False, False]],
    ]


def test_a_non_finite_reward_or_observation_names_the_behavior_and_the_agent() -> None:
    with pytest.raises(UnityDataError) as raised:
        steps_from_proto(
            [agent(1, [[0.0, 0.0]]), agent(7, [[0.0, 0.0]], reward=np.nan)], _spec(VECTOR), "B"
        )
    assert str(raised.value) == (
        "behavior 'B': agent 7 sent a non-finite reward (NaN or infinity); expected finite "
        "numbers: check what the agent adds in the Unity project (CollectObservations, "
        "AddReward/SetReward)"
    )
    with pytest.raises(
        UnityDataError, match=r"agent 4 sent a non-finite observation 0 \('vector'\)"
    ):
        steps_from_proto([agent(4, [[np.inf, 0.0]])], _spec(VECTOR), "B")


def test_an_observation_of_another_shape_is_named() -> None:
    with pytest.raises(UnityDataError) as raised:
        steps_from_proto([agent(1, [[0.0, 0.0]]), agent(2, [[0.0, 0.0, 1.0]])], _spec(VECTOR), "B")
    assert str(raised.value) == (
        "behavior 'B': agent 2 sent observation 0 ('vector') of shape (3,) with 3 values, the "
        "behavior's spec says (2,); every agent of a behavior must have the same sensors"
    )


PIXELS = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3) * 4


def test_a_png_camera_in_hwc_layout_package_2() -> None:
    spec = ObservationSpec((4, 5, 3), (2, 2, 1), 0, "camera")
    obs = visual(png(PIXELS), (4, 5, 3), (2, 2, 1), (0, 1, 2))
    decisions, _ = steps_from_proto([agent(1, [obs])], _spec(spec), "B")
    assert decisions.obs[0].dtype == np.float32
    np.testing.assert_allclose(decisions.obs[0][0], PIXELS / 255.0, atol=1e-6)


def test_a_png_camera_in_chw_layout_package_3() -> None:
    spec = ObservationSpec((3, 4, 5), (1, 2, 2), 0, "camera")
    obs = visual(png(PIXELS), (3, 4, 5), (1, 2, 2), (0, 1, 2))
    decisions, _ = steps_from_proto([agent(1, [obs])], _spec(spec), "B")
    np.testing.assert_allclose(decisions.obs[0][0], PIXELS.transpose(2, 0, 1) / 255.0, atol=1e-6)


def test_a_grayscale_camera_averages_the_channels_its_mapping_joins() -> None:
    spec = ObservationSpec((4, 5, 1), (2, 2, 1), 0, "gray")
    obs = visual(png(PIXELS), (4, 5, 1), (2, 2, 1), (0, 0, 0))
    decisions, _ = steps_from_proto([agent(1, [obs])], _spec(spec), "B")
    np.testing.assert_allclose(decisions.obs[0][0, :, :, 0], PIXELS.mean(axis=2) / 255.0, atol=1e-6)


@pytest.mark.parametrize(("layout", "shape"), [((2, 2, 1), (4, 5, 4)), ((1, 2, 2), (4, 4, 5))])
def test_concatenated_pngs_with_a_channel_mapping_and_padding(
    layout: tuple[int, ...], shape: tuple[int, ...]
) -> None:
    second = 255 - PIXELS
    spec = ObservationSpec(shape, layout, 0, "stack")
    obs = visual(png(PIXELS) + png(second), shape, layout, (0, 1, 2, 3, -1, -1))
    decisions, _ = steps_from_proto([agent(1, [obs]), agent(2, [obs])], _spec(spec), "B")
    expected = np.concatenate([PIXELS, second[:, :, :1]], axis=2) / 255.0
    if layout == (1, 2, 2):
        expected = expected.transpose(2, 0, 1)
    assert decisions.obs[0].shape == (2, *shape)
    np.testing.assert_allclose(decisions.obs[0][1], expected, atol=1e-6)


def test_a_png_that_does_not_fit_the_spec_is_named() -> None:
    spec = ObservationSpec((8, 5, 3), (2, 2, 1), 0, "camera")
    obs = visual(png(PIXELS), (8, 5, 3), (2, 2, 1), (0, 1, 2))
    with pytest.raises(UnityDataError) as raised:
        steps_from_proto([agent(1, [obs])], _spec(spec), "B")
    assert str(raised.value) == (
        "a compressed observation 'camera' decodes to shape (4, 5, 3), its spec says (8, 5, 3)"
    )


def test_behavior_names_split_into_name_and_team() -> None:
    assert split_behavior_name("Soccer?team=1") == ("Soccer", 1)
    assert split_behavior_name("Basic") == ("Basic", 0)
    assert split_behavior_name("Walker?team=12") == ("Walker", 12)
