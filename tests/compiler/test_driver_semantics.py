"""The generated driver submits exactly the tasks the ``.tile`` program describes.

Random well-formed programs (nested loops with affine bounds and steps that may vary,
lets, if/else-if/else, powers, calls whose tile indices are arbitrary expressions folded
into range with ``%``, hostile identifiers) are compiled; the driver's task sequence is compared with a
reference interpreter of the AST, on one rank and, rank by rank, on a 2x2 grid.
This covers expression generation, renaming, and the hoisting of ownership tests.
"""
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiledsl.compiler import nodes as n
from tiledsl.compiler.codegen import generate
from tiledsl.compiler import check_source
from tiledsl.driverload import import_driver
from tiledsl.runtime.layout import make_distribution, make_matrices, make_params
from tiledsl.runtime.options import Options
from tiledsl.compiler.source import decode

from submitted import submitted_tasks

OPTIONS = Options(n=100, tiles={"nb": 32})  # A: 4x4 tiles, B: 4x7 tiles, both ragged
HEADER = """\
program random_nest {
  tiling uniform(nb = 32)
  param q = 3
  matrix A[n, n] = random spd
  matrix B[n, 2 * n] = zeros
"""
HOSTILE = ["range", "_me", "class", "p", "rt", "CALLS_", "None", "min", "_r0", "lambda", "def", "user_me",
           "_submit", "True", "print", "__import__"]


class Generator:
    """Writes one random program; names are fresh, so nothing shadows anything."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.count = 0
        self.lines = []
        self.hostile = list(HOSTILE)
        self.rng.shuffle(self.hostile)

    def name(self) -> str:
        self.count += 1
        if self.hostile and self.rng.random() < 0.4:
            return self.hostile.pop()  # each hostile name once: nothing may shadow
        return f"v{self.count}"

    def atom(self, scope):
        choices = [str(self.rng.randint(0, 5)), "q", "A.mt", "A.nt", "B.nt", "A.m"]
        return self.rng.choice(choices + list(scope) * 3)

    def expr(self, scope, depth=0):
        r = self.rng.random()
        if depth > 2 or r < 0.35:
            return self.atom(scope)
        a, b = self.expr(scope, depth + 1), self.expr(scope, depth + 1)
        if r < 0.6:
            return f"{a} {self.rng.choice(['+', '-', '*'])} {b}"
        if r < 0.7:
            return f"({a}) {self.rng.choice(['//', '%'])} {self.rng.randint(1, 4)}"
        if r < 0.75:
            return f"({a}) ** (({b}) % 3)"
        if r < 0.8:
            return f"-({a})"
        if r < 0.9:
            return f"{self.rng.choice(['min', 'max'])}({a}, {b})"
        return f"({a} - {b})"

    def step(self, loops):
        """Mostly none; else a constant, or a power of an outer loop variable."""
        r = self.rng.random()
        if r < 0.7:
            return ""
        if r < 0.85 or not loops:
            return f" step {self.rng.choice([2, 3])}"
        return f" step 2 ** ({self.rng.choice(loops)} % 3)"

    def bound(self, loops, low: bool):
        options = ([str(self.rng.randint(-1, 2))] if low else [str(self.rng.randint(0, 4)), "A.nt", "B.mt"])
        for var in loops:
            options += [var, f"{var} + 1", f"{var} - 1", f"2 * {var}", f"min({var}, 3)", f"max({var}, 1)"]
        return self.rng.choice(options)

    def condition(self, scope, depth=0):
        if depth < 1 and self.rng.random() < 0.3:
            op = self.rng.choice(["and", "or"])
            return f"{self.condition(scope, depth + 1)} {op} {self.condition(scope, depth + 1)}"
        if depth < 1 and self.rng.random() < 0.15:
            return f"not ({self.condition(scope, depth + 1)})"
        op = self.rng.choice(["<", "<=", ">", ">=", "==", "!="])
        return f"{self.expr(scope, 1)} {op} {self.expr(scope, 1)}"

    def tile(self, matrix, scope):
        rows, cols = ("A.mt", "A.nt") if matrix == "A" else ("B.mt", "B.nt")
        return f"{matrix}[({self.expr(scope)}) % {rows}, ({self.expr(scope)}) % {cols}]"

    def call(self, scope):
        kind = self.rng.random()
        priority = f" priority {self.expr(scope)}" if self.rng.random() < 0.3 else ""
        if kind < 0.3:
            return f"potrf({self.tile(self.rng.choice('AB'), scope)}){priority}"
        if kind < 0.6:
            return f"trsm({self.tile('A', scope)}, {self.tile('B', scope)}){priority}"
        if kind < 0.9:
            return f"gemm({self.tile('A', scope)}, {self.tile('A', scope)}, {self.tile('B', scope)}){priority}"
        return f"release {self.tile(self.rng.choice('AB'), scope)}"

    def block(self, loops, scope, depth, indent):
        pad = "  " * indent
        for _ in range(self.rng.randint(1, 3)):
            r = self.rng.random()
            if r < 0.3 and depth < 3:
                var = self.name()
                low, high = self.bound(loops, True), self.bound(loops, False)
                self.lines.append(f"{pad}for {var} in {low} .. {high}{self.step(loops)} {{")
                self.block(loops + [var], scope + [var], depth + 1, indent + 1)
                self.lines.append(f"{pad}}}")
            elif r < 0.45:
                var = self.name()
                self.lines.append(f"{pad}let {var} = {self.expr(scope)}")
                scope = scope + [var]
            elif r < 0.6 and depth < 4:
                self.lines.append(f"{pad}if {self.condition(scope)} {{")
                self.block(loops, scope, depth + 1, indent + 1)
                if self.rng.random() < 0.3:
                    self.lines.append(f"{pad}}} else if {self.condition(scope)} {{")
                    self.block(loops, scope, depth + 1, indent + 1)
                if self.rng.random() < 0.5:
                    self.lines.append(f"{pad}}} else {{")
                    self.block(loops, scope, depth + 1, indent + 1)
                self.lines.append(f"{pad}}}")
            else:
                self.lines.append(pad + self.call(scope))

    def program(self) -> str:
        self.block([], [], 0, 1)
        self.lines.append("  potrf(A[q % A.mt, 0]) priority q")  # every matrix and the param are used
        self.lines.append("  trsm(A[0, 0], B[0, 0])")
        return HEADER + "\n".join(self.lines) + "\n}\n"


# ---------------------------------------------------------------- reference interpreter
class Interpreter:
    def __init__(self, program: n.Program, matrices, params):
        self.program, self.matrices = program, matrices
        self.env = {"n": params.n, "nb": params.nb, "q": params.q}
        self.tasks = []

    def run(self):
        self.block(self.program.body)
        return self.tasks

    def block(self, stmts):
        saved = dict(self.env)
        for stmt in stmts:
            match stmt:
                case n.For(var=var, start=start, stop=stop, step=step, body=body):
                    for value in range(self.value(start), self.value(stop), self.value(step) if step else 1):
                        self.env[var.text] = value
                        self.block(body)
                    self.env.pop(var.text, None)
                case n.Let(name=name, value=value):
                    self.env[name.text] = self.value(value)
                case n.If(cond=cond, then=then, orelse=orelse):
                    self.block(then if self.value(cond) else orelse)
                case n.Call(kernel=kernel, args=args):
                    self.tasks.append((kernel.text, tuple((t.matrix.text, self.value(t.row), self.value(t.col))
                                                          for t in args)))
                case n.Release():
                    pass
        self.env = saved

    def value(self, e):
        match e:
            case n.IntLit(value=v):
                return v
            case n.Name(ident=i):
                return self.env[i.text]
            case n.Attr(matrix=m, attr=a):
                return getattr(self.matrices[m.text], a.text)
            case n.Method(matrix=m, method=q, arg=arg):
                return getattr(self.matrices[m.text], q.text)(self.value(arg))
            case n.Func(func=f, args=args):
                return {"min": min, "max": max}[f.text](*(self.value(a) for a in args))
            case n.Unary(op="-", operand=o):
                return -self.value(o)
            case n.Unary(op="not", operand=o):
                return not self.value(o)
            case n.Binary(op="and", left=l, right=r):
                return self.value(l) and self.value(r)
            case n.Binary(op="or", left=l, right=r):
                return self.value(l) or self.value(r)
            case n.Binary(op=op, left=l, right=r):
                a, b = self.value(l), self.value(r)
                return {"+": a + b, "-": a - b, "*": a * b, "<": a < b, "<=": a <= b, ">": a > b,
                        ">=": a >= b, "==": a == b, "!=": a != b}.get(op) if op not in ("//", "%", "**") else (
                    a // b if op == "//" else a % b if op == "%" else a ** b)
        raise AssertionError(e)


def compile_and_load(text, folder, tag):
    result = check_source(decode(str(folder / f"{tag}.tile"), text.encode()))
    assert result.ok, f"{result.report()}\n{text}"
    path = folder / f"{tag}.py"
    path.write_text(generate(result.checked))
    return result.checked, import_driver(path, f"semantics_{tag}")


def check_program(text, folder, tag):
    checked, driver = compile_and_load(text, folder, tag)
    params = make_params(driver, OPTIONS)
    single = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, (1, 1), 0), 0)
    expected = Interpreter(checked.program, single, params).run()
    everything = submitted_tasks(driver, OPTIONS, (1, 1), 0, None)
    got = [(call.kernel, tiles) for call, tiles in everything]
    assert got == expected, text
    grid = (2, 2)
    placed = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, grid, 0), 0)
    for rank in range(4):
        mine = [(call.kernel, tiles) for call, tiles in submitted_tasks(driver, OPTIONS, grid, 0, rank)]
        wanted = [task for task in expected
                  if any(placed[m].rank_of(i, j) == rank for m, i, j in task[1])]
        assert mine == wanted, f"rank {rank}\n{text}"
    return expected


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2 ** 32 - 1))
def test_random_programs_submit_what_they_say(tmp_path, seed):
    check_program(Generator(seed).program(), tmp_path, f"p{seed}")


def test_generator_produces_work(tmp_path):
    sizes = [len(check_program(Generator(seed).program(), tmp_path, f"g{seed}")) for seed in range(20)]
    assert sum(sizes) > 100 and max(sizes) > 10


def test_else_if_chain_and_lets(tmp_path):
    text = HEADER + """\
  for i in -1 .. A.mt + 1 {
    let r = (i * 7) % A.mt
    if i < 0 { potrf(A[0, 0]) }
    else if i == 0 { trsm(A[r, r], B[r, 2 * r]) }
    else if i >= A.mt { release A[0, 0] }
    else { gemm(A[r, 0], A[0, r], B[r, i]) priority q - i }
    for j in max(i, 0) .. min(i + 2, B.nt) {
      let c = j
      let d = c + q
      trsm(A[i % A.mt, j % A.nt], B[(d - q) % B.mt, d % B.nt])
    }
  }
  potrf(A[q % A.mt, 0]) priority q
}
"""
    tasks = check_program(text, tmp_path, "chain")
    assert tasks[0] == ("potrf", (("A", 0, 0),))
    assert ("trsm", (("A", 0, 0), ("B", 0, 0))) in tasks


def test_binary_tree_reduction_with_a_step_of_powers(tmp_path):
    """``step 2 ** (l + 1)``: the step varies with the outer loop (the nest is then walked whole);
    pairs of tiles 2 ** l apart are combined, as a Python reference of the tree says."""
    text = HEADER + """\
  for l in 0 .. q {
    for i in 0 .. A.mt step 2 ** (l + 1) {
      if i + 2 ** l < A.mt { trsm(A[i + 2 ** l, 0], B[i, 0]) }
    }
  }
  potrf(A[q % A.mt, 0]) priority q
}
"""
    checked, driver = compile_and_load(text, tmp_path, "tree")
    assert "dataflow" not in vars(driver)  # a step that varies: no share plan
    tasks = check_program(text, tmp_path, "tree")
    mt = 4  # n = 100 in tiles of 32
    reference = [("trsm", (("A", i + 2 ** l, 0), ("B", i, 0)))
                 for l in range(3) for i in range(0, mt, 2 ** (l + 1)) if i + 2 ** l < mt]
    assert tasks[:-1] == reference == [("trsm", (("A", 1, 0), ("B", 0, 0))), ("trsm", (("A", 3, 0), ("B", 2, 0))),
                                       ("trsm", (("A", 2, 0), ("B", 0, 0)))]


def test_an_index_that_may_fail_is_computed_only_where_its_call_is_reached(tmp_path):
    """``A[i // z, 0]`` in a loop that runs no time where z = 0: its rank test, hoisted above that
    loop, divided by zero though the call is never reached (a correct program failed). An index
    that cannot fail is still tested once per iteration of the loop it depends on."""
    text = HEADER + """\
  let z = q - 3
  for i in 0 .. A.mt {
    for j in 0 .. z {
      trsm(A[i // z, 0], B[i, 2 ** (z - 1)])
      trsm(A[i, 0], B[0, A.width(j)])
    }
    potrf(A[i, i])
  }
  for k in 0 .. z { potrf(A[0 % z, 0]) }
}
"""
    tasks = check_program(text, tmp_path, "unreached")
    assert tasks == [("potrf", (("A", i, i),)) for i in range(4)]
    driver = (tmp_path / "unreached.py").read_text()
    body = driver[driver.index("for i in range(0, A.mt)"):]
    hoisted = body.index("A.rank_of(i, 0)")  # before the loop over j, as before
    assert hoisted < body.index("for j in range") < body.index("A.rank_of(i // z, 0)")
