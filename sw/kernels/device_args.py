"""The one check of the device-resident arguments of the kernels' ``*_launch`` entry points
(:func:`sw.kernels.linear.linear_launch`, :func:`sw.kernels.attention.attention_launch`,
:func:`sw.kernels.eltwise.eltwise_launch`): every buffer and semaphore live, of the stream's
device, and every buffer at least as large as the layout the kernel reads or writes."""

from __future__ import annotations

from collections.abc import Mapping

from sw.runtime import Buffer, NPUError, Semaphore, Stream

__all__ = ["check_device_args"]


def check_device_args(stream: Stream, what: str, buffers: Mapping[str, tuple[Buffer, int, str]],
                      sems: Mapping[str, Semaphore] | None = None) -> None:
    """Refuse, before anything is allocated, uploaded, counted or launched, a device argument
    the kernel launched on ``stream`` cannot use.

    Parameters
    ----------
    stream : Stream
        Where the kernel runs; its device must own every buffer and semaphore.
    what : str
        The problem size, for the messages (e.g. ``"M=16, K=32, N=16"``).
    buffers : mapping of str to (Buffer, int, str)
        Argument name to ``(buffer, bytes the kernel reads or writes, its layout)``.
    sems : mapping of str to Semaphore, optional
        Argument name to semaphore.

    Raises
    ------
    TypeError
        An argument that is not a :class:`Buffer` / :class:`Semaphore`.
    ValueError
        A buffer or semaphore of another device, or a buffer smaller than its layout (the
        message names it, the bytes needed and the bytes given).
    NPUError
        A freed buffer or semaphore (its memory or id may belong to someone else now).
    """
    device = stream.device
    for name, (buf, need, layout) in buffers.items():
        if not isinstance(buf, Buffer):
            raise TypeError(f"{name} must be a Buffer, got {type(buf).__name__}")
        if buf.device is not device:
            raise ValueError(f"{name} is a buffer of another device than the stream's")
        if buf.freed:
            raise NPUError(f"{name} ({buf.nbytes} bytes at {buf.addr:#x}) was freed")
        if buf.nbytes < need:
            raise ValueError(f"{name} too small for {what}: needs {need} bytes ({layout}), "
                             f"got {buf.nbytes}")
    for name, sem in (sems or {}).items():
        if not isinstance(sem, Semaphore):
            raise TypeError(f"{name} must be a Semaphore, got {type(sem).__name__}")
        if sem.device is not device:
            raise ValueError(f"{name} is a semaphore of another device than the stream's")
        if sem.freed:
            raise NPUError(f"{name} (semaphore {sem.id}) was freed")
