"""fasttrain.estimate.forecast."""
