"""How every dim of a specialization is cut into blocks, and what its blocks take in shared memory."""
