"""Code generation: a plan and a translated body become a standalone Pallas module, as IR."""
