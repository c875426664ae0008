"""An example evtrain plugin: one plugin of each group, registered by entry points.

* ``evtrain.stats_writer`` → ``jsonl``: :func:`~evtrain_example_plugin.jsonl.get_jsonl_writers`
  writes every summary period to ``<run folder>/stats.jsonl``.
* ``evtrain.subscriber`` → ``save_log``: :func:`~evtrain_example_plugin.save_log.connect_save_log`
  appends every saved checkpoint and exported model to ``<run folder>/artifacts.jsonl``.
* ``evtrain.trainer`` → ``reward_clip``: :func:`~evtrain_example_plugin.reward_clip.trainer_types`
  adds ``trainer_type: ppo_reward_clip``, PPO on clipped rewards.
* ``evtrain.initializer`` → ``slurm``: :func:`~evtrain_example_plugin.slurm.slurm_initializer`
  sets up ``torch.distributed`` from the variables SLURM's ``srun`` sets.

The trainer and the initializer import torch; they are imported only when evtrain loads them.
"""

from __future__ import annotations

from evtrain_example_plugin.jsonl import JsonLinesWriter, get_jsonl_writers
from evtrain_example_plugin.save_log import ArtifactLog, connect_save_log

__all__ = ["ArtifactLog", "JsonLinesWriter", "connect_save_log", "get_jsonl_writers"]
