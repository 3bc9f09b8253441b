"""Backends: TIR -> machine code for each target kind."""
