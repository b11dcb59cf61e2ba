"""Translation: a traced body's equations become IR statements, one rule per primitive."""
