"""Typed errors. Everything below the CLI raises these; `cli.py` turns them into one line and exit 1."""


class SsmprofError(Exception):
    """Base class: the message is the one line the user sees."""


class UnknownWorkload(SsmprofError):
    pass


class UnknownPreset(SsmprofError):
    pass


class InvalidConfig(SsmprofError):
    """An override the workload cannot accept (bad value, shape the model cannot take)."""


class NoGpu(SsmprofError):
    pass


class KernelUnavailable(SsmprofError):
    """A fused kernel (or mamba-ssm itself) that the run needs is not installed or not built."""


class GpuOutOfMemory(SsmprofError):
    pass


class GpuKernelFault(SsmprofError):
    """A CUDA error inside a kernel (illegal address, launch failure): the CUDA context is lost."""


class TrainingFailed(SsmprofError):
    """A library raised a RuntimeError (not a CUDA error, not an out-of-memory) while a workload was built or
    trained: e.g. a kernel library refusing this host's stack. The message names the workload and the library's
    first line."""


class InputFileError(SsmprofError):
    pass


class ScriptFailed(SsmprofError):
    """A training script under `ssmprof profile --script` failed, or ran too few `ssmprof.step()` iterations;
    the message names the script's file and line."""


class CorruptRun(SsmprofError):
    """A run directory that is missing, incomplete, failed, or does not match the data contract."""


class CorruptFile(SsmprofError):
    """A device profile, baseline or suite manifest that is missing, unreadable, of another version, or not of
    the data contract."""


class UserWorkloadInvalid(SsmprofError):
    """A workload named by the user's `file.py:Name` or `module:Name` that cannot be loaded or breaks the
    `Workload` contract (a missing method, a wrong return type); the message names the user's file and line."""


class UserCodeFailed(SsmprofError):
    """An exception raised inside a user's workload (its build, batch, loss, config); the message names the
    innermost line of the user's file it passed through."""


class DuplicateRun(SsmprofError):
    """The same run (same run directory content, `schema.run_identity`) given twice where each run must count
    once: a baseline or history would count one measurement as two and understate the noise."""
