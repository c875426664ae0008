"""The messages of ML-Agents' communication protocol (API 1.5.0), built without a protoc step.

A Unity build and its trainer exchange ``UnityMessageProto`` messages over gRPC: the build is the
client of the one method ``communicator_objects.UnityToExternalProto/Exchange``, the trainer its
server.  The schema here is ML-Agents' own (``protobuf-definitions/proto/mlagents_envs/
communicator_objects/*.proto`` of com.unity.ml-agents 2.x-4.x, the files mlagents-envs 0.28 was
generated from), written down as data: :data:`MESSAGES` lists each message's fields with their
numbers and types, and the module turns it into a ``FileDescriptorProto`` of package
``communicator_objects`` in a descriptor pool of its own, and that into message classes.  What
goes over the wire depends only on the field numbers and types, so these classes read and write
exactly what a build's generated C# classes do.  The names are ML-Agents' too, including the few
that break protobuf's naming style (``agentInfos``, ``baseRLCapabilities``).

The classes are this module's attributes, named as in ML-Agents (``UnityMessageProto``,
``AgentInfoProto``, ...): ``from evtrain.unity import schema; schema.UnityMessageProto()``.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = [
    "EXCHANGE_METHOD",
    "MESSAGES",
    "PACKAGE",
    "SERVICE",
    "message_class",
]

PACKAGE = "communicator_objects"
SERVICE = f"{PACKAGE}.UnityToExternalProto"
EXCHANGE_METHOD = f"/{SERVICE}/Exchange"
"""The gRPC method a build calls: ``UnityMessageProto`` in, ``UnityMessageProto`` out."""

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "float": _F.TYPE_FLOAT,
    "int32": _F.TYPE_INT32,
    "bool": _F.TYPE_BOOL,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
}

ENUMS: dict[str, tuple[tuple[str, int], ...]] = {
    "CommandProto": (("STEP", 0), ("RESET", 1), ("QUIT", 2)),
    "CompressionTypeProto": (("NONE", 0), ("PNG", 1)),
    "ObservationTypeProto": (("DEFAULT", 0), ("GOAL_SIGNAL", 1)),
    "SpaceTypeProto": (("discrete", 0), ("continuous", 1)),
}
"""Top-level enums, as ML-Agents declares them (their values share the package's scope)."""

Field = tuple[str, int, str, bool]
"""``(name, number, type, repeated)``; the type is a scalar's name, a message's or an enum's."""

MESSAGES: dict[str, tuple[Field, ...]] = {
    # agent_action.proto
    "AgentActionProto": (
        ("vector_actions_deprecated", 1, "float", True),
        ("value", 4, "float", False),
        ("continuous_actions", 6, "float", True),
        ("discrete_actions", 7, "int32", True),
    ),
    # observation.proto
    "ObservationProto.FloatData": (("data", 1, "float", True),),
    "ObservationProto": (
        ("shape", 1, "int32", True),
        ("compression_type", 2, "CompressionTypeProto", False),
        ("compressed_data", 3, "bytes", False),  # oneof observation_data
        ("float_data", 4, "ObservationProto.FloatData", False),  # oneof observation_data
        ("compressed_channel_mapping", 5, "int32", True),
        ("dimension_properties", 6, "int32", True),
        ("observation_type", 7, "ObservationTypeProto", False),
        ("name", 8, "string", False),
    ),
    # agent_info.proto
    "AgentInfoProto": (
        ("reward", 7, "float", False),
        ("done", 8, "bool", False),
        ("max_step_reached", 9, "bool", False),
        ("id", 10, "int32", False),
        ("action_mask", 11, "bool", True),
        ("observations", 13, "ObservationProto", True),
        ("group_id", 14, "int32", False),
        ("group_reward", 15, "float", False),
    ),
    # agent_info_action_pair.proto (demonstration files)
    "AgentInfoActionPairProto": (
        ("agent_info", 1, "AgentInfoProto", False),
        ("action_info", 2, "AgentActionProto", False),
    ),
    # brain_parameters.proto
    "ActionSpecProto": (
        ("num_continuous_actions", 1, "int32", False),
        ("num_discrete_actions", 2, "int32", False),
        ("discrete_branch_sizes", 3, "int32", True),
        ("action_descriptions", 4, "string", True),
    ),
    "BrainParametersProto": (
        ("vector_action_size_deprecated", 3, "int32", True),
        ("vector_action_descriptions_deprecated", 5, "string", True),
        ("vector_action_space_type_deprecated", 6, "SpaceTypeProto", False),
        ("brain_name", 7, "string", False),
        ("is_training", 8, "bool", False),
        ("action_spec", 9, "ActionSpecProto", False),
    ),
    # capabilities.proto
    "UnityRLCapabilitiesProto": (
        ("baseRLCapabilities", 1, "bool", False),
        ("concatenatedPngObservations", 2, "bool", False),
        ("compressedChannelMapping", 3, "bool", False),
        ("hybridActions", 4, "bool", False),
        ("trainingAnalytics", 5, "bool", False),
        ("variableLengthObservation", 6, "bool", False),
        ("multiAgentGroups", 7, "bool", False),
    ),
    # demonstration_meta.proto
    "DemonstrationMetaProto": (
        ("api_version", 1, "int32", False),
        ("demonstration_name", 2, "string", False),
        ("number_steps", 3, "int32", False),
        ("number_episodes", 4, "int32", False),
        ("mean_reward", 5, "float", False),
    ),
    # engine_configuration.proto
    "EngineConfigurationProto": (
        ("width", 1, "int32", False),
        ("height", 2, "int32", False),
        ("quality_level", 3, "int32", False),
        ("time_scale", 4, "float", False),
        ("target_frame_rate", 5, "int32", False),
        ("show_monitor", 6, "bool", False),
    ),
    # header.proto
    "HeaderProto": (("status", 1, "int32", False), ("message", 2, "string", False)),
    # training_analytics.proto
    "TrainingEnvironmentInitialized": (
        ("mlagents_version", 1, "string", False),
        ("mlagents_envs_version", 2, "string", False),
        ("python_version", 3, "string", False),
        ("torch_version", 4, "string", False),
        ("torch_device_type", 5, "string", False),
        ("num_envs", 6, "int32", False),
        ("num_environment_parameters", 7, "int32", False),
        ("run_options", 8, "string", False),
    ),
    "TrainingBehaviorInitialized": (
        ("behavior_name", 1, "string", False),
        ("trainer_type", 2, "string", False),
        ("extrinsic_reward_enabled", 3, "bool", False),
        ("gail_reward_enabled", 4, "bool", False),
        ("curiosity_reward_enabled", 5, "bool", False),
        ("rnd_reward_enabled", 6, "bool", False),
        ("behavioral_cloning_enabled", 7, "bool", False),
        ("recurrent_enabled", 8, "bool", False),
        ("visual_encoder", 9, "string", False),
        ("num_network_layers", 10, "int32", False),
        ("num_network_hidden_units", 11, "int32", False),
        ("trainer_threaded", 12, "bool", False),
        ("self_play_enabled", 13, "bool", False),
        ("curriculum_enabled", 14, "bool", False),
        ("config", 15, "string", False),
    ),
    # unity_rl_initialization_input.proto
    "UnityRLInitializationInputProto": (
        ("seed", 1, "int32", False),
        ("communication_version", 2, "string", False),
        ("package_version", 3, "string", False),
        ("capabilities", 4, "UnityRLCapabilitiesProto", False),
        ("num_areas", 5, "int32", False),
    ),
    # unity_rl_initialization_output.proto
    "UnityRLInitializationOutputProto": (
        ("name", 1, "string", False),
        ("communication_version", 2, "string", False),
        ("log_path", 3, "string", False),
        ("brain_parameters", 5, "BrainParametersProto", True),
        ("package_version", 7, "string", False),
        ("capabilities", 8, "UnityRLCapabilitiesProto", False),
    ),
    # unity_rl_input.proto
    "UnityRLInputProto.ListAgentActionProto": (("value", 1, "AgentActionProto", True),),
    "UnityRLInputProto.AgentActionsEntry": (
        ("key", 1, "string", False),
        ("value", 2, "UnityRLInputProto.ListAgentActionProto", False),
    ),
    "UnityRLInputProto": (
        ("agent_actions", 1, "UnityRLInputProto.AgentActionsEntry", True),  # map<string, ...>
        ("command", 4, "CommandProto", False),
        ("side_channel", 5, "bytes", False),
    ),
    # unity_rl_output.proto
    "UnityRLOutputProto.ListAgentInfoProto": (("value", 1, "AgentInfoProto", True),),
    "UnityRLOutputProto.AgentInfosEntry": (
        ("key", 1, "string", False),
        ("value", 2, "UnityRLOutputProto.ListAgentInfoProto", False),
    ),
    "UnityRLOutputProto": (
        ("agentInfos", 2, "UnityRLOutputProto.AgentInfosEntry", True),  # map<string, ...>
        ("side_channel", 3, "bytes", False),
    ),
    # unity_input.proto, unity_output.proto, unity_message.proto
    "UnityInputProto": (
        ("rl_input", 1, "UnityRLInputProto", False),
        ("rl_initialization_input", 2, "UnityRLInitializationInputProto", False),
    ),
    "UnityOutputProto": (
        ("rl_output", 1, "UnityRLOutputProto", False),
        ("rl_initialization_output", 2, "UnityRLInitializationOutputProto", False),
    ),
    "UnityMessageProto": (
        ("header", 1, "HeaderProto", False),
        ("unity_output", 2, "UnityOutputProto", False),
        ("unity_input", 3, "UnityInputProto", False),
    ),
}
"""Every message, nested ones as ``Outer.Inner``."""

_MAP_ENTRIES = {"UnityRLInputProto.AgentActionsEntry", "UnityRLOutputProto.AgentInfosEntry"}
_ONEOFS = {"ObservationProto": ("observation_data", {"compressed_data", "float_data"})}


def _field(
    name: str, number: int, kind: str, repeated: bool
) -> descriptor_pb2.FieldDescriptorProto:
    field = _F(name=name, number=number, json_name=_json_name(name))
    field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if kind in _SCALARS:
        field.type = _SCALARS[kind]
    elif kind in ENUMS:
        field.type = _F.TYPE_ENUM
        field.type_name = f".{PACKAGE}.{kind}"
    else:
        field.type = _F.TYPE_MESSAGE
        field.type_name = f".{PACKAGE}.{kind}"
    return field


def _json_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name="evtrain/unity/communicator_objects.proto", package=PACKAGE, syntax="proto3"
    )
    for enum_name, values in ENUMS.items():
        enum = file.enum_type.add(name=enum_name)
        for value_name, number in values:
            enum.value.add(name=value_name, number=number)
    declared: dict[str, descriptor_pb2.DescriptorProto] = {}
    for full_name, fields in sorted(MESSAGES.items(), key=lambda item: item[0].count(".")):
        outer, _, inner = full_name.rpartition(".")
        parent = declared[outer].nested_type if outer else file.message_type
        message = parent.add(name=inner)
        declared[full_name] = message
        if full_name in _MAP_ENTRIES:
            message.options.map_entry = True
        oneof_name, members = _ONEOFS.get(full_name, ("", set()))
        if oneof_name:
            message.oneof_decl.add(name=oneof_name)
        for name, number, kind, repeated in fields:
            field = message.field.add()
            field.CopyFrom(_field(name, number, kind, repeated))
            if name in members:
                field.oneof_index = 0
    service = file.service.add(name="UnityToExternalProto")
    service.method.add(
        name="Exchange",
        input_type=f".{PACKAGE}.UnityMessageProto",
        output_type=f".{PACKAGE}.UnityMessageProto",
    )
    return file


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())


def message_class(name: str) -> Any:
    """The message class of ``name`` (``"UnityMessageProto"``, or ``"Outer.Inner"``)."""
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


# The classes ML-Agents' code names, as this module's attributes.
AgentActionProto = message_class("AgentActionProto")
AgentInfoActionPairProto = message_class("AgentInfoActionPairProto")
AgentInfoProto = message_class("AgentInfoProto")
ActionSpecProto = message_class("ActionSpecProto")
BrainParametersProto = message_class("BrainParametersProto")
DemonstrationMetaProto = message_class("DemonstrationMetaProto")
EngineConfigurationProto = message_class("EngineConfigurationProto")
HeaderProto = message_class("HeaderProto")
ObservationProto = message_class("ObservationProto")
TrainingBehaviorInitialized = message_class("TrainingBehaviorInitialized")
TrainingEnvironmentInitialized = message_class("TrainingEnvironmentInitialized")
UnityInputProto = message_class("UnityInputProto")
UnityMessageProto = message_class("UnityMessageProto")
UnityOutputProto = message_class("UnityOutputProto")
UnityRLCapabilitiesProto = message_class("UnityRLCapabilitiesProto")
UnityRLInitializationInputProto = message_class("UnityRLInitializationInputProto")
UnityRLInitializationOutputProto = message_class("UnityRLInitializationOutputProto")
UnityRLInputProto = message_class("UnityRLInputProto")
UnityRLOutputProto = message_class("UnityRLOutputProto")

CommandProto = {name: number for name, number in ENUMS["CommandProto"]}
"""``STEP``, ``RESET``, ``QUIT``: :attr:`UnityRLInputProto.command`'s values."""
