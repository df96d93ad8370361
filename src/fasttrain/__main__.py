"""`python -m fasttrain` (and `torchrun -m fasttrain`) behave like the `fasttrain` command."""
from fasttrain.cli import run

run()
