"""Exceptions. Every message says what to do."""


class NcclprofError(RuntimeError):
    """Base class of the errors ncclprof raises."""


class TooLateError(NcclprofError):
    """enable() was called after NCCL had already decided which profiler plugin to use."""


class PluginConflictError(NcclprofError):
    """Another NCCL profiler plugin is configured or loaded; NCCL loads only one per process."""


class BinaryMissingError(NcclprofError):
    """The plugin library or ncclmerge is missing or cannot run on this machine."""


class MergeError(NcclprofError):
    """ncclmerge failed; the message carries its own explanation."""


class NcclprofWarning(UserWarning):
    """Something ncclprof could not do as asked; the job goes on."""
