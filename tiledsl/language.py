"""The language's facts that the compiler and the runtime both hold.

The compiler judges a program by them, and the runtime judges by them again what a driver
declares (a driver may come from elsewhere, a run's options may change the sizes): both read
these tables, so the two cannot drift apart. Standard library only, as :mod:`.drivercontract`:
the runtime imports nothing of the compiler.
"""

#: the settings of each tiling, as ``tiling KIND(...)``, ``--nb``/``--B``... and the driver name them
TILING_SETTINGS = {"uniform": ("nb",), "hybrid": ("B", "b", "s")}
RANDOM_KINDS = ("spd", "general", "diagdom")  # the words after ``random``
NAMED_INITS = ("zeros", "identity")  # the other initial values a matrix may name
SQUARE_KINDS = ("spd",)  # the random kinds that exist for square matrices only
READ_MODES = ("in", "inout")
WRITE_MODES = ("out", "inout")
#: the integers a program computes stay within it (the compiler's E211 for constants; a run
#: refuses a parameter beyond it, and a kernel's int argument)
INT64_MAX = 2**63 - 1
#: most loop iterations a run walks (the compiler warns of a loop that would run more: W301)
MAX_ITERATIONS = 10**10
#: the operators of conditions, spelt as words: a name spelt so could never be used in an expression
OPERATOR_WORDS = ("and", "or", "not")
#: the words that begin a statement or a declaration in a program: a kernel so named could not be called
#: (in, out and inout begin an 'in matrix' declaration among the program's statements)
STATEMENT_WORDS = ("let", "release", "matrix", "workspace", "param", "tiling", "check", "require", "for", "if",
                   "in", "out", "inout")


def statement_word_kernel(name: str, calls: tuple = ()) -> tuple:
    """The message, notes and hint of E207 for a kernel named by a word that begins a statement
    (or an 'in matrix' declaration), given the places of its ``calls`` found ("7:5")."""
    what = f"'{name} matrix' declaration" if name in ("in", "out", "inout") else f"'{name}' statement"
    shown = ", ".join(calls[:8]) + (f" and {len(calls) - 8} more" if len(calls) > 8 else "")
    said = f"its calls at {shown} read as {what}s" if len(calls) > 1 else \
        f"its call at {calls[0]} reads as {_article(what)} {what}" if calls else \
        f"a call {name}(...) would read as {_article(what)} {what}"
    return (f"'{name}' begins a statement, and cannot name a kernel", said,
            f"name the kernel and its function in the kernel module otherwise (my_{name})")


def _article(words: str) -> str:
    return "an" if words.lstrip("'")[0] in "aeiou" else "a"


#: the kernels whose reflectors ``check qr`` replays: a program calling none of them has nothing to check
QR_KERNELS = ("geqrt", "tpqrt", "ttqrt")
#: The arguments of each built-in check, per accepted arity: "-" takes no qualifier, "o" an operand's
#: (a triangle, unit, symmetric, transposed), "r" a result's part (lower, upper or symmetric), "t" the
#: triangle a factor is in (lower, the default, or upper).
CHECK_ARGUMENTS = {"cholesky": ("t",), "lu": ("-", "--"), "qr": ("--",), "solve": ("o--",), "inverse": ("oo",),
                   "product": ("roo",)}
#: what a check may say of a matrix: the triangle it means, its symmetry, its transpose
CHECK_QUALIFIERS = ("lower", "upper", "unit", "symmetric", "transposed")


def tiling_of(setting: str) -> str:
    """The tiling whose setting ``setting`` is (``b``: hybrid)."""
    return next(kind for kind, settings in TILING_SETTINGS.items() if setting in settings)


def hybrid_slices_fit(B: int, b: int, s: int) -> bool:
    """Whether a hybrid block of width B holds its s slices: s-1 of width b and a last one of the
    rest, which must not be empty: (s-1)·b < B."""
    return (s - 1) * b < B


def most_slices(B: int, b: int) -> int:
    """The most slices a hybrid block of width B holds with slices of width b."""
    return (B - 1) // b + 1


def hybrid_slices_advice(B: int, b: int, s: int) -> str:
    """What fits where (s-1)·b >= B (so s >= 2): the widest b with this s, the most slices of this b,
    a larger B, one slice."""
    widest, most = (B - 1) // (s - 1), most_slices(B, b)
    choices = [f"b at most {widest} with s={s}" if widest else "", f"s at most {most} with b={b}" if most > 1 else "",
               "a larger B", "s=1"]
    choices = [choice for choice in choices if choice]
    return ", ".join(choices[:-1]) + ", or " + choices[-1]
