"""Run state: checkpoints written atomically and checked, the run's typed state, resume."""
