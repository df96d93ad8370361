"""fasttrain.hardware.probe."""
