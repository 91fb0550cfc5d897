"""Example kernels that show what profkit finds (see README.md here)."""
