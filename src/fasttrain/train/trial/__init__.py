"""The tuning trial before the first epoch and the compute-thread A/B of the first steps."""
