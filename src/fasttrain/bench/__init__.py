"""fasttrain.bench."""
