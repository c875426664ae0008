"""The bookkeeping every trainer shares: environment steps counted (globally in a distributed
run), episodes' returns and lengths reported, and one summary per ``summary_freq`` steps,
labelled with the boundary step, as ML-Agents' ``RLTrainer`` does.  A loop *has* a
:class:`Bookkeeping` (:attr:`evtrain.trainers.base.Trainer.bookkeeping`) and calls it:
:meth:`~Bookkeeping.record_step` and :meth:`~Bookkeeping.record_infos` for each vector step,
:meth:`~Bookkeeping.sync_step` before a schedule reads :attr:`~Bookkeeping.step`,
:meth:`~Bookkeeping.end_period` at the end of every ``advance``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from evtrain.bus.reporter import StatsReporter
from evtrain.events.stats import CUMULATIVE_REWARD, StatsAggregationMethod
from evtrain.trainers.envs import AutoresetTracker
from evtrain.trainers.info_stats import InfoStats
from evtrain.trainers.settings import TrainerSettings
from evtrain.world import World

HISTOGRAM = StatsAggregationMethod.HISTOGRAM
SUM = StatsAggregationMethod.SUM


class Bookkeeping:
    """Steps, episodes and summaries of one behavior (see the module's docstring).

    :param envs: the vector environment (read for ``take_worker_restarts`` only).
    :param wait_for_update: waits for the update in flight (``threaded``); a summary holds
        every update of its period.
    :param summarise: writes the summary labelled with its argument; default
        :meth:`write_summary` (a loop adds the statistics it sums over a period first, then
        calls it).
    """

    def __init__(
        self,
        behavior_name: str,
        settings: TrainerSettings,
        reporter: StatsReporter,
        world: World,
        envs: Any,
        autoreset: AutoresetTracker,
        num_envs: int,
        wait_for_update: Callable[[], None],
        summarise: Callable[[int], None] | None = None,
    ) -> None:
        self.behavior_name = behavior_name
        self.settings = settings
        self.reporter = reporter
        self.world = world
        self.envs = envs
        self.autoreset = autoreset
        self.num_envs = num_envs
        self.wait_for_update = wait_for_update
        self._summarise = self.write_summary if summarise is None else summarise
        self.training = True
        """``False`` under ``--inference``: summaries say ``Is Training`` 0."""
        self.step = 0
        """Environment steps so far, summed over the sub-environments (of every rank: a
        distributed run makes it global at the end of every ``advance``)."""
        self.local_step = 0
        """Environment steps this process took since it started."""
        self.synced = (0, 0)
        """(step, local_step) at the last all-reduce of the step count."""
        self._step_dirty = False
        self.last_summary = 0
        """The step the last summary was labelled with (a ``summary_freq`` multiple, or the
        last step of a run, see :meth:`write_final_summary`)."""
        self.summarised_at = 0
        """:attr:`step` when the last summary was written: nothing is pending while equal."""
        self._episode_reward = np.zeros(self.num_envs, dtype=np.float64)
        self._episode_length = np.zeros(self.num_envs, dtype=np.int64)
        self.recent_rewards: deque[float] = deque(maxlen=100)
        """The cumulative rewards of the last (up to) 100 finished episodes."""
        self.info_stats = InfoStats(settings.info_stats, reporter, behavior_name)
        """Records the behavior's ``info_stats`` (:mod:`evtrain.trainers.info_stats`)."""

    def restart(self) -> None:
        """Count afresh from step 0 (``--inference``), with nothing summarised yet."""
        self.step = self.local_step = 0
        self.synced = (0, 0)
        self.last_summary = self.summarised_at = 0

    def restore(self, step: int, last_summary: int, recent_rewards: list[float]) -> None:
        """Continue from a checkpoint's counters (``--resume``)."""
        self.step = step
        self.synced = (self.step, self.local_step)
        self.last_summary = last_summary
        self.summarised_at = self.step
        self.recent_rewards.clear()
        self.recent_rewards.extend(recent_rewards)

    def write_final_summary(self) -> None:
        """End of training (``max_steps`` reached or a stop requested): report the period still
        open as one last ``stats`` event labelled with :attr:`step`, so that every run writes
        at least one summary.  Nothing when the last ``advance`` wrote one (``max_steps``
        a multiple of ``summary_freq``) or no step was taken.  A collective in a distributed
        run, like every summary: all ranks call it.  With ``threaded``, it waits for the
        update in flight first: the summary holds it.
        """
        self.wait_for_update()
        if self.step == self.summarised_at:
            return
        self.reporter.set_stat("Step", float(self.step))
        self._summarise(self.step)

    @property
    def last_mean_reward(self) -> float | None:
        """Mean cumulative reward of the last (up to) 100 finished episodes; ``None`` before the
        first.  What the runner records with a checkpoint."""
        if not self.recent_rewards:
            return None
        return float(np.mean(self.recent_rewards))

    def record_step(
        self, rewards: npt.NDArray[Any], dones: npt.NDArray[np.bool_], valid: npt.NDArray[np.bool_]
    ) -> None:
        """Count one vector step's transitions and report the episodes it finished."""
        self._step_dirty = True
        if self.autoreset.masked:  # autoreset steps, agents not in their episode
            self._episode_reward += np.where(valid, rewards, 0.0)
            self._episode_length += valid
            transitions = int(valid.sum())
            finished = dones & valid
        else:  # every step is a transition: skip the masking (this runs every step)
            self._episode_reward += rewards
            self._episode_length += 1
            transitions = self.num_envs
            finished = dones
        self.step += transitions
        self.local_step += transitions
        if finished.any():
            for i in np.flatnonzero(finished):
                reward = float(self._episode_reward[i])
                self.recent_rewards.append(reward)
                self.reporter.add_stat(CUMULATIVE_REWARD, reward, HISTOGRAM)
                self.reporter.add_stat("Environment/Episode Length", float(self._episode_length[i]))
            self._episode_reward[finished] = 0.0
            self._episode_length[finished] = 0

    def record_infos(
        self,
        infos: Mapping[str, Any],
        dones: npt.NDArray[np.bool_],
        valid: npt.NDArray[np.bool_],
    ) -> None:
        """Record the ``info_stats`` keys of one vector step's ``infos`` (after
        :meth:`record_step`, with the same ``dones`` and ``valid``)."""
        self.info_stats.record(infos, dones, valid)

    def sync_step(self) -> None:
        """Distributed: make :attr:`step` global, adding every rank's transitions since the last
        call (one all-reduce; nothing when no step was recorded since, on every rank alike)."""
        if self.world.size == 1 or not self._step_dirty:
            return
        step, local_step = self.synced
        total = self.world.sum([self.local_step - local_step])[0]
        self.step = step + int(total)
        self.synced = (self.step, self.local_step)
        self._step_dirty = False

    def end_period(self) -> None:
        """Report ``Step``, and the summary once ``step`` has crossed a ``summary_freq`` multiple.

        Called at the end of every ``advance``, after the update, so the summary includes
        the losses of the update that just happened.  An update that crosses several multiples
        writes one summary, labelled with the last of them: its values cannot be split between
        the boundaries.  In a distributed run the step becomes global first, and rank 0's
        summary holds every rank's values.
        """
        self.sync_step()
        self.reporter.set_stat("Step", float(self.step))
        freq = self.settings.summary_freq
        boundary = self.step // freq * freq
        if boundary > self.last_summary:
            # threaded: a summary holds every update of its period, as it does unthreaded
            self.wait_for_update()
            self._summarise(boundary)

    def write_summary(self, label: int) -> None:
        """Write the summary of the period, labelled ``label``."""
        self.reporter.add_stat("Is Training", 1.0 if self.training else 0.0)
        # vectorization: ray's workers lost (and restarted) in the period
        take_restarts = getattr(self.envs, "take_worker_restarts", None)
        if take_restarts is not None:
            self.reporter.add_stat("Environment/Worker Restarts", float(take_restarts()), SUM)
        merge = self.world.merge_stats if self.world.size > 1 else None
        self.reporter.write_stats(label, merge=merge)
        self.last_summary = label
        self.summarised_at = self.step
