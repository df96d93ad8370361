"""The training loop: epochs, the step engine, precision, optimizer and schedule, validation."""
