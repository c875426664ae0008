"""``environment_parameters``: the curriculum that moves their lessons, the values drawn
for each environment, and the wrappers that set them (Gymnasium, PettingZoo)."""
