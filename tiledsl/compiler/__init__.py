"""The compiler: ``.tile`` text to a Python driver, one module per stage.

source (text, spans) → parser (Lark parse tree → typed AST of :mod:`.nodes`) →
analysis (names, types, access summaries, diagnostics; :mod:`.affine` proves
index facts, :mod:`.kernel_module` reads a program's kernel module without
running it) → codegen (render model → jinja2 template → driver text). The
pipeline (:mod:`.pipeline`) chains them and collects diagnostics; it never
imports the runtime.
"""
from .pipeline import Result, check_path, check_source, compile_path, prelude

__all__ = ["Result", "check_path", "check_source", "compile_path", "prelude"]
