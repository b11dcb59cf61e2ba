"""Declaration and binding: a decorated function becomes a checked spec, a call's arguments a binding."""
