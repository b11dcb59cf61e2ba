"""Running kernels: the callable kernel, its backends, the interpreter's launches, autodiff."""
