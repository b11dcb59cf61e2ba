"""The typed IR of generated code, its Pallas vocabulary, its names and its one printer."""
