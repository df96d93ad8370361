"""fasttrain.ui."""
