"""fasttrain: fast, measured PyTorch training on one machine."""
__version__ = "0.1.0"
