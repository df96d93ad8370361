"""fasttrain.models.registry."""
