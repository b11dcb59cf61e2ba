"""The warning of a tuning cache that cannot be written, or of a file in it that is ignored."""

__all__ = ["TuningCacheWarning"]


class TuningCacheWarning(UserWarning):
    """The tuning cache on disk cannot be used as it is; calls take the declared defaults.

    Either a tuning was measured, and is returned, but could not be written
    (`STATICKERNEL_CACHE_DIR` names a folder that cannot be written), or a cached file is
    ignored: it cannot be read, holds no tuning (not JSON, another type, fields missing), or
    chooses constants outside the candidates or that a rule refuses at its shapes. The
    message names the file; deleting it clears it, and `kernel.tune(..., force=True)`
    measures again. Each file is reported once a process."""
