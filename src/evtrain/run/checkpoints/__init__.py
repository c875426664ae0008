"""What a run keeps on disk: the run folder and its lock, checkpoints (the manager, one
file, whether it fits, the tracked list), training_status.json, when and how a save is
made in the background, and an elastic group's resume."""
