"""Analyses of trained runs: spectra of the learned state transitions."""
