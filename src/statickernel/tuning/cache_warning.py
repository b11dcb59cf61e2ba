"""The warning a tuning raises when its result cannot be cached."""

__all__ = ["TuningCacheWarning"]


class TuningCacheWarning(UserWarning):
    """A tuning was measured, and is returned, but could not be written to the disk cache
    (`STATICKERNEL_CACHE_DIR` names a folder that cannot be written): later calls take the
    declared defaults."""
