"""Kernel functions for the E212/E213 cases: check reads this file, never runs it."""
import functools
from numpy import add as imported  # an import: check cannot tell what it binds


def three(A, B, C):
    pass


def ranged(A, B=None):
    pass


def variadic(*tiles):
    pass


def keyword(A, *, scale):
    pass


def reused(A):
    pass


def reused(A, B):  # the later definition is the one the module ends with
    pass


alias = three
lam = lambda A, B: None


class Klass:
    pass


constant = 3

if functools:
    def maybe(A):
        pass
else:
    def maybe(A, B):
        pass


@functools.lru_cache
def decorated(A, B, C):
    pass


def unused_name(A):
    pass


annotated: int = 3
typed_alias: object = three
