"""From the command line to a prepared run: arguments, profile, data, model, plan, memory fit, batch search."""
