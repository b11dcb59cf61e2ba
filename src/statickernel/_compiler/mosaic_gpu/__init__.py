"""The Mosaic GPU back-end: Hopper (`sm_90a`) and Blackwell (`sm_100a`) launches.

Its stages take the front's trace (`_compiler/trace/`) to a `plgpu.kernel` module: `layout/`
(blocks checked against TMA and the register layout), `lower/` (the body translated into
register geometries), `forms/` and `schedules/` (the register forms and launch schedules, asked
in order), `plan/` (the frozen `LaunchPlan` and its figures) and `emit/` (the module, printed
once). `backend.py` is what the compile path asks of it.
"""
