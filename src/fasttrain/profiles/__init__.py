"""fasttrain.profiles."""
