"""Commands: one module per verb, each with register(app); shared options in commands/options.py.

A command parses its flags, gathers (probe, resolve, load), calls the compute functions of the layer
below and renders. Heavy imports stay inside the command function: cli.py imports every module here
to build `fasttrain --help`.
"""
