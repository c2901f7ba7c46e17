"""Kernels of exits.tile: each ends the process its own way."""
import ctypes
import os


def leave(a):
    os._exit(3)


def crash(a):
    ctypes.string_at(0)  # a segmentation fault
