"""Several processes: the torchrun launch and DDP inside a worker."""
