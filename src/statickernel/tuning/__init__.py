"""Tuning a kernel's constants: the candidates `sk.tune(...)` declares, each planned, then
measured by the best measure this machine has (a device run, a deviceless compile, or the plan
alone), ranked, and the best cached on disk for later calls."""
