"""fasttrain.datasets.build."""
