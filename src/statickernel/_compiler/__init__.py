"""The compiler's stages, one sub-package each: declare, trace, layout, lower, plan, emit; `build` runs them."""
