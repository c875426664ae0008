"""Reward providers (ML-Agents' name for what the ``reward_signals`` key configures) and
imitation: the base of the intrinsic reward providers (:mod:`.reward_provider`), curiosity
(:mod:`.curiosity`), random network distillation (:mod:`.rnd`), GAIL (:mod:`.gail`), behavioral
cloning (:mod:`.behavioral_cloning`), and what a trainer builds from its settings (:mod:`.build`;
the extrinsic reward is the environment's own, scaled by its ``strength`` in the loops).  Reward
providers serve every algorithm and import none."""
