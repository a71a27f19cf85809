"""Running kernelwright's evaluations on more than one machine (Ray)."""
