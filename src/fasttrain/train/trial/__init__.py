"""Tuning, its timed half: the tuning trial before the first epoch (tune.py) and the A/Bs of the run's first steps
(one step hook, step_ab.py: compute threads, thread_ab.py; bf16 against fp32 on a CPU, precision_ab.py).

These run the training step, so they live in train/. What they measure is kept, and what they decide is decided,
by tuning/ (store.py, decide.py: pure, no torch), which sits low in the layers because doctor, estimate and bench
read the same measurements without train/.
"""
