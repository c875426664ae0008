"""Reward signals and imitation: curiosity and RND (:mod:`.reward_signal`), GAIL
(:mod:`.gail`), behavioral cloning (:mod:`.behavioral_cloning`), and what a trainer builds from
its settings (:mod:`.build`).  Signals serve every algorithm and import none."""
