"""Stop signals: before training, during it (finish the step, save, stop) and after it."""
