"""The run layer: what ``evtrain learn`` does with a config, from the run folder to shutdown."""
