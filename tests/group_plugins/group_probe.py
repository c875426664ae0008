"""The group trainers with the ``torchrun`` tests' probe (:mod:`tests.dist_plugins.dist_probe`),
loaded with ``--plugins tests/group_plugins``: trainer types ``probe_poca`` and
``probe_mappo`` write ``$EVTRAIN_PROBE_OUT/trainer-rank<R>.json`` (step, local step, episodes,
a checksum of every network and optimizer tensor) once ``max_steps`` is reached."""

from __future__ import annotations

from tests.dist_plugins.dist_probe import _Probe

from evtrain.trainers.base import Trainer
from evtrain.trainers.mappo import MAPPOTrainer
from evtrain.trainers.poca import POCATrainer


class ProbePOCA(_Probe, POCATrainer):
    pass


class ProbeMAPPO(_Probe, MAPPOTrainer):
    pass


def trainer_types() -> dict[str, type[Trainer]]:
    return {"probe_poca": ProbePOCA, "probe_mappo": ProbeMAPPO}


EVTRAIN_PLUGINS = {"evtrain.trainer": {"group_probe": trainer_types}}
