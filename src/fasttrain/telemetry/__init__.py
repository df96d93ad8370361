"""fasttrain.telemetry.recorder."""
