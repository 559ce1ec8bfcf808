"""Measuring: the run, its waves, jobs, decisions, steering and recovery."""
