"""fasttrain.core."""
