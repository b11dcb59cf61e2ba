"""Compiling for a GPU without one: ptxas, and what the compile says about a kernel."""
