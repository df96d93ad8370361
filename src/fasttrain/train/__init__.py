"""fasttrain.train."""
