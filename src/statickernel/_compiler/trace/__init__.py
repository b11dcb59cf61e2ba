"""The body traced on tile-shaped values, and the rewrite of results reduced across blocks."""
