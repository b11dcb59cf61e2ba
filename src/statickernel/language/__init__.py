"""What a kernel body calls: tiles and loads, loops and products, reductions, positions and random numbers."""
