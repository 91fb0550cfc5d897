"""Analyses over plain data read from exports: summaries, occupancy, sync stalls."""
