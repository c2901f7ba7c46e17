"""Kernels of exits.tile: each ends the process its own way."""
import ctypes
import os


def leave(a):
    os._exit(3)


def crash(a):
    ctypes.string_at(0)  # a segmentation fault


def signal(a):
    import signal as signals
    import time
    os.kill(os.getpid(), signals.SIGSEGV)  # to the process: another thread than this one may take it
    time.sleep(30)
