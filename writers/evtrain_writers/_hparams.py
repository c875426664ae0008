"""A behavior's hyperparameters as a session of TensorBoard's HParams dashboard.

The dashboard (``tensorboard.plugins.hparams``) reads summaries whose metadata names the plugin
``hparams`` and carries an ``HParamsPluginData``.  A run (an event-file folder) holding a
``_hparams_/session_start_info`` summary *is* a session: here ``<run_id>/<Behavior>``, so a
behavior's hyperparameters sit in the same run as its curves.  The dashboard's metrics are
that run's scalar tags (the stat keys), and a metric's value is the last scalar of its tag: the
final metrics are joined with nothing copied.  (torch's ``SummaryWriter.add_hparams`` writes
its summaries to a new sub-run, so it must copy the metric values there as scalars.)

What is deliberately not written, both because TensorBoard keeps the *first* record of a tag:

* No ``_hparams_/experiment``.  TensorBoard takes the first experiment it finds anywhere in the
  logdir as the column list of every run (``backend_context._find_experiment_tag``), so with
  ``tensorboard --logdir results`` one run's hyperparameter names would hide every other run's
  (a SAC run's ``tau`` beside a PPO run's ``beta``).  Without one, TensorBoard computes the
  experiment from all session starts (the union of names, with types and ranges) and all the
  sessions' scalar tags, which is what we would have declared, for every run at once.
* No session end for an interrupted run.  A metadata record is kept per (run, tag) from the
  first event file (``plugin_event_accumulator``), and ``--resume`` adds a new file to the same
  folder: an end written at the interruption would pin the session's status for good.  Without
  one the dashboard shows the status *unknown* (it has no "stopped" status) until a resumed run
  completes or fails.

The protobuf classes are tensorboard's own, imported on first use: a run pays for them when the
first hyperparameters arrive, not at start-up, and never on the scalar path.  The plugin's
``metadata`` module is not imported: it loads tensorboard's TensorFlow stub (~0.16 s of a
2,000-step run's start); the summary metadata it would build is three fields, written here.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from evtrain.events.payloads import RunStatus

HParamValue = bool | float | str
"""What a session's hyperparameter holds: ``bool_value``, ``number_value`` or ``string_value``."""

PLUGIN_NAME = "hparams"
"""The dashboard reads summaries whose metadata names this plugin (its ``metadata.PLUGIN_NAME``)."""
PLUGIN_DATA_VERSION = 0
"""The ``HParamsPluginData.version`` the plugin's ``metadata.create_summary_metadata`` sets."""
SESSION_START_INFO_TAG = "_hparams_/session_start_info"
SESSION_END_INFO_TAG = "_hparams_/session_end_info"

_END_STATUS = {
    RunStatus.COMPLETED: "STATUS_SUCCESS",
    RunStatus.STOPPED: "STATUS_SUCCESS",
    RunStatus.FAILED: "STATUS_FAILURE",
}
"""The ``api_pb2.Status`` name written at a run's end; an interrupted run writes none."""


def flatten_hparams(value: Mapping[Any, Any], prefix: str = "") -> dict[str, HParamValue]:
    """One ``section/key`` name per leaf of a nested mapping.

    bools stay bools, other real numbers become floats, strings stay; anything else (lists,
    ``None``, non-finite numbers, which the dashboard would drop) is its ``str()``, as in the
    ``Hyperparameters`` text summary.  An empty mapping is the leaf ``"{}"``.
    """
    flat: dict[str, HParamValue] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            flat.update(flatten_hparams(item, f"{name}/"))
        elif isinstance(item, Mapping):
            flat[name] = "{}"
        elif isinstance(item, (bool, str)):
            flat[name] = item
        elif isinstance(item, numbers.Real) and math.isfinite(item):
            flat[name] = float(item)
        else:
            flat[name] = str(item)
    return flat


def session_start_event(hparams: Mapping[Any, Any], wall_time: float) -> bytes:
    """A serialised Event (step 0) holding ``_hparams_/session_start_info`` with the flattened
    ``hparams``; its ``group_name`` is left empty, so each session is a group of its own."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    start = plugin_data_pb2.SessionStartInfo(start_time_secs=wall_time)
    for name, item in flatten_hparams(hparams).items():
        if isinstance(item, bool):
            start.hparams[name].bool_value = item
        elif isinstance(item, float):
            start.hparams[name].number_value = item
        else:
            start.hparams[name].string_value = item
    data = plugin_data_pb2.HParamsPluginData(session_start_info=start)
    return _event(wall_time, SESSION_START_INFO_TAG, data)


def session_end_event(status: RunStatus, wall_time: float) -> bytes | None:
    """A serialised Event holding ``_hparams_/session_end_info``: SUCCESS for a completed run,
    FAILURE for a failed one; ``None`` for an interrupted one (see the module docstring)."""
    name = _END_STATUS.get(status)
    if name is None:
        return None
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

    end = plugin_data_pb2.SessionEndInfo(status=api_pb2.Status.Value(name), end_time_secs=wall_time)
    data = plugin_data_pb2.HParamsPluginData(session_end_info=end)
    return _event(wall_time, SESSION_END_INFO_TAG, data)


def _event(wall_time: float, tag: str, plugin_data: Any) -> bytes:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.compat.proto.types_pb2 import DT_FLOAT

    # As summary_v2 writes them: the data is in the metadata, the value an empty float tensor
    # (the plugin's NULL_TENSOR: shape (0,), no values).
    plugin_data.version = PLUGIN_DATA_VERSION
    content = plugin_data.SerializeToString()
    value = Summary.Value(
        tag=tag,
        metadata=SummaryMetadata(
            plugin_data=SummaryMetadata.PluginData(plugin_name=PLUGIN_NAME, content=content)
        ),
        tensor=TensorProto(
            dtype=DT_FLOAT, tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=0)])
        ),
    )
    event = Event(wall_time=wall_time, step=0, summary=Summary(value=[value]))
    data: bytes = event.SerializeToString()
    return data
