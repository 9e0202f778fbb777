"""What a kernel that refused its arguments must leave untouched: the device's free DRAM, its
free pool semaphores and the commands submitted on each stream (public runtime API only)."""

from sw.runtime import Device, OutOfSemaphoresError


def device_state(device: Device) -> dict:
    """Allocator statistics, free pool semaphores and commands submitted per stream. The
    semaphores are counted by taking them all and giving them back in reverse order, so the
    pool's order (which one the next allocation gets) is unchanged."""
    sems = []
    try:
        while True:
            sems.append(device.alloc_semaphore())
    except OutOfSemaphoresError:
        pass
    for s in reversed(sems):
        s.free()
    return {"memory": device.memory_stats(), "free_semaphores": len(sems),
            "submitted": {q: s.commands_submitted for q, s in device.streams.items()}}
