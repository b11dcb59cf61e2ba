"""`python -m statickernel`: the same command line as the `statickernel` console script."""

import sys

from .cli import PROG, main

if __name__ == "__main__":
    sys.argv[0] = PROG
    sys.exit(main())
