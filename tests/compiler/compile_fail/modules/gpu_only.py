"""A kernel module that gives a kernel its GPU body only (e212_only_a_gpu_body.tile)."""


def shift_gpu(A, alpha):
    A += alpha
