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


def c_exit(a):
    ctypes.CDLL(None).exit(0)  # as a Fortran STOP in a wrapped library: no Python code runs


def posix_exit(a):
    import posix
    posix._exit(0)
