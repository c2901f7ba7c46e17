"""OpenBLAS's thread pool across a fork of this process.

OpenBLAS stops its threads before any fork (its own fork handler) and starts them again only
when next asked, leaving the handles of the stopped threads in its table meanwhile. Where
that later start fails (under an address-space limit, ``ulimit -v``, grown in the meantime), it
keeps a stale handle, and the process hangs as it exits, joining that handle: by then a thread
of another library (SciPy's OpenBLAS) may own it. Restarting the pool right after the fork,
while the stacks just freed are still in the C library's cache, takes no new memory.
"""
from __future__ import annotations


def restart_after_fork() -> None:
    """Start the thread pools of the OpenBLAS libraries loaded (numpy's, SciPy's) again, each with
    its thread count, in the parent of a fork just made."""
    from threadpoolctl import OpenBLASController, ThreadpoolController

    for library in ThreadpoolController().select(internal_api="openblas").lib_controllers:
        # threadpoolctl lets one thread change OpenBLAS's count; a run (launch) may be that thread
        OpenBLASController.clear_controlling_thread(force=True)
        try:
            library.set_num_threads(library.get_num_threads())  # its first step restarts the pool
        finally:
            OpenBLASController.clear_controlling_thread(force=True)
