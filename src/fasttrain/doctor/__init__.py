"""fasttrain.doctor.checks."""
