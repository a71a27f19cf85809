"""The region's language as a GBNF grammar (llama.cpp's format), for constrained decoding.

A small model's region answers fail most often in ways no math is involved in: prose around the
code, a call to a function the target does not have (`gelu(...)`, `tl.tanh`, `torch.*`), a name
nothing declares (`eps`, `mean`, `M_SQRT1_2`), the whole kernel again. Sampled under this
grammar, an answer is one fenced block in the fence the prompt asks for, holding statements that
assign the region's output or locals, over the names in scope (the skeleton's loads, `y`, the
row's `cols`, the loop's `j`) and the target's real math functions; none of those failures can be
sampled.

Locals are the one thing a context-free grammar cannot follow by name: that a name is declared
before it is read needs context. So locals have positional names, `t0`, `t1`, ... in order of
declaration (at most MAX_LOCALS in scope), and the grammar is unrolled per count of locals in
scope: after `float t0 = ...;` the statements that follow may read t0, and nothing else new. A
block's locals go out of scope at its `}` (C), where the count returns to the block's start.
What the grammar does not follow: that `y` is assigned at all, value ranges, and in CUDA that every
thread calls block_sum/block_max. Everything is derived from the scaffold (its segment's kind and
args, its target); nothing is per task.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelwright.scaffold.types import Scaffold, SegmentKind

MAX_LOCALS = 6  # declared locals in scope at once; the suite's oracle regions use at most 3

# Real functions of each target, by arity. C++: <cmath> (the skeleton includes it); the bare double
# names are there too (a float argument is promoted), bare `abs` is not (the int one).
_CPP_STD1 = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "cbrt", "tanh", "sinh", "cosh",
             "sin", "cos", "tan", "atan", "asin", "acos", "erf", "erfc", "fabs", "abs", "floor", "ceil", "round",
             "trunc")
_C_FLOAT1 = ("expf", "exp2f", "expm1f", "logf", "log2f", "log10f", "log1pf", "sqrtf", "cbrtf", "tanhf", "sinhf",
             "coshf", "sinf", "cosf", "tanf", "atanf", "erff", "erfcf", "fabsf", "floorf", "ceilf", "roundf", "truncf")
_C_DOUBLE1 = ("exp", "log", "log1p", "sqrt", "tanh", "erf", "fabs", "floor", "ceil")
_C_FLOAT2 = ("fmaxf", "fminf", "powf", "hypotf", "fmodf", "copysignf")
_C_DOUBLE2 = ("fmax", "fmin", "pow", "hypot", "fmod", "copysign")
CPP_FUNCTIONS = {1: tuple(f"std::{n}" for n in _CPP_STD1) + _C_FLOAT1 + _C_DOUBLE1,
                 2: tuple(f"std::{n}" for n in _C_DOUBLE2) + _C_FLOAT2 + _C_DOUBLE2,
                 3: ("std::fma", "fmaf", "fma")}
# CUDA's math API (device functions of math.h, with its fast intrinsics)
CUDA_FUNCTIONS = {1: _C_FLOAT1 + _C_DOUBLE1 + ("rsqrtf", "rsqrt", "__expf", "__logf", "__sinf", "__cosf"),
                  2: _C_FLOAT2 + _C_DOUBLE2 + ("__fdividef", "__powf"),
                  3: ("fmaf", "fma")}
# triton.language members (each checked against the recorded member list by the tests); no tl.tanh
TRITON_FUNCTIONS = {1: ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "erf", "abs", "sin", "cos",
                        "floor", "ceil"),
                    2: ("maximum", "minimum"), 3: ("where", "fma", "clamp")}
TRITON_REDUCTIONS = ("sum", "max", "min", "cumsum")  # row segments only, over the row: axis=0
C_CONSTANTS = ("INFINITY", "M_PI")  # macros of <cmath> / math.h, which the skeletons include


def local_name(k: int) -> str:
    """The k-th local declared in scope: positional, so the grammar can know it is declared."""
    return f"t{k}"


def local_decl(scaffold: Scaffold) -> str:
    """How the first local is declared in this scaffold's language (the prompt shows it: a model
    not told that locals are t0, t1, ... fights the grammar over the names it meant to write)."""
    return f"{local_name(0)} = ..." if scaffold.language == "python" else f"float {local_name(0)} = ...;"


def lit(text: str) -> str:
    """A GBNF string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def _alts(items: list[str] | tuple[str, ...]) -> str:
    return " | ".join(lit(i) for i in items)


@dataclass(frozen=True)
class Scope:
    """What the region reads and assigns at one place: outside any loop, or (C row kernels) inside
    the loop over the row, where `j`, `x(j)` and a whole-row output's `y[j]` exist."""

    reads: tuple[str, ...]
    writes: tuple[str, ...]


def region_grammar(scaffold: Scaffold) -> str:
    """The GBNF of a region answer for this scaffold; '' when it has no region."""
    if not scaffold.available or scaffold.segment is None:
        return ""
    if scaffold.language == "python":
        return _triton(scaffold)
    return _c_like(scaffold)


# ---- C++ and CUDA ------------------------------------------------------------------------------

def _c_scopes(sc: Scaffold) -> dict[str, Scope]:
    """Scopes by loop flag: "o" outside any loop over j, "j" inside one."""
    seg = sc.segment
    assert seg is not None
    if seg.kind != SegmentKind.ROW:  # a GEMM's region is elementwise on its product
        names = tuple(a.name for a in seg.args) + ("y",)
        return {"o": Scope(names + C_CONSTANTS, ("y",))}
    base = ("cols", "row") + C_CONSTANTS + (("threadIdx.x", "blockDim.x") if sc.target == "cuda" else ())
    scalar_y = ("y",) if seg.per_row_output else ()
    in_loop = tuple(f"{a.name}(j)" for a in seg.args) + ("j",) + (() if seg.per_row_output else ("y[j]",))
    return {"o": Scope(base + scalar_y, scalar_y),
            "j": Scope(base + scalar_y + in_loop, scalar_y + (() if seg.per_row_output else ("y[j]",)))}


def _loop_heads(sc: Scaffold) -> list[str]:
    idx = '("int64_t" | "int") [ ]+ "j" sp "=" sp'
    serial = f'"for" sp "(" sp {idx} "0" sp ";" sp "j" sp "<" sp "cols" sp ";" sp ("++j" | "j++" | "j" sp "+=" sp "1") sp ")"'
    heads = [serial]
    if sc.target == "cuda":  # the block's threads stride over the row
        heads.append(f'"for" sp "(" sp {idx} "threadIdx.x" sp ";" sp "j" sp "<" sp "cols" sp ";" sp "j" sp "+=" sp '
                     '"blockDim.x" sp ")"')
    return heads


def _c_like(sc: Scaffold) -> str:
    seg = sc.segment
    assert seg is not None
    functions = dict(CUDA_FUNCTIONS if sc.target == "cuda" else CPP_FUNCTIONS)
    if sc.target == "cuda" and seg.kind == SegmentKind.ROW:
        functions[1] = functions[1] + ("block_sum", "block_max")  # the skeleton's block reductions
    scopes = _c_scopes(sc)
    rules = [f'root ::= {lit("```" + sc.language)} "\\n" gap stmts1-0o "```"',
             # spacing: inside a statement, spaces and line breaks; between statements, also // comments
             'sp ::= [ \\t\\n]{0,17}',
             'gap ::= ([ \\t\\n] | "//" [^\\n]* "\\n"){0,40}',
             'num ::= ([0-9]{1,24} "." [0-9]{0,24} | "." [0-9]{1,24}) ([eE] [-+]? [0-9]{1,3})? "f"? | '
             '[0-9]{1,24} [eE] [-+]? [0-9]{1,3} "f"? | [0-9]{1,24}',
             'aop ::= "=" | "+=" | "-=" | "*=" | "/="',
             'cmpop ::= "<=" | ">=" | "==" | "!=" | "<" | ">"',
             'cast ::= "(" sp "float" sp ")"']
    rules += [f"fn{n} ::= {_alts(names)}" for n, names in functions.items()]
    if seg.kind == SegmentKind.ROW:
        rules.append(f"loophead ::= {' | '.join(f'({h})' for h in _loop_heads(sc))}")
    for flag, scope in scopes.items():
        for k in range(MAX_LOCALS + 1):
            rules += _c_scope_rules(scope, k, flag, seg.kind == SegmentKind.ROW)
    return "\n".join(rules) + "\n"


def _c_scope_rules(scope: Scope, k: int, flag: str, row: bool) -> list[str]:
    """The rules of one scope with k locals declared: statements, and expressions over its names."""
    s = f"{k}{flag}"
    locals_ = tuple(local_name(i) for i in range(k))
    # statements at this count of locals, then maybe a declaration and the rest at the next count
    # (a repetition, not right recursion: a long answer must not nest one level per statement)
    decl = f"decl-{s} gap stmts-{k + 1}{flag}" if k < MAX_LOCALS else ""
    rules = [f"stmts-{s} ::= (stmt-{s} gap)*" + (f" ({decl})?" if decl else ""),
             f"stmts1-{s} ::= stmt-{s} gap stmts-{s}" + (f" | {decl}" if decl else "")]
    if k < MAX_LOCALS:
        # no `const`: locals are assignable, and which of them were const would be context again
        rules.append(f'decl-{s} ::= "float" [ ]+ {lit(local_name(k))} sp "=" sp expr-{s} sp ";"')
    body = f"(block-{s} | stmt-{s})"
    writes = scope.writes + locals_  # none outside the loop of a whole-row kernel, before a local
    stmt = ([f"lval-{s} sp aop sp expr-{s} sp \";\""] if writes else []) + [f"block-{s}",
            f'"if" sp "(" sp expr-{s} sp ")" sp {body} (sp "else" ([ \\t\\n]+ stmt-{s} | sp block-{s}))?']
    if row:  # a loop over the row's columns: j and the accessors come into scope
        stmt.append(f"loophead sp (block-{k}j | stmt-{k}j)")
    rules += [f"stmt-{s} ::= {' | '.join(stmt)}",
              f'block-{s} ::= "{{" gap stmts-{s} "}}"',
              f"name-{s} ::= {_alts(scope.reads + locals_)}",
              f'expr-{s} ::= or-{s} (sp "?" sp expr-{s} sp ":" sp expr-{s})?',
              f'or-{s} ::= cmp-{s} (sp ("&&" | "||") sp cmp-{s})*',
              f"cmp-{s} ::= sum-{s} (sp cmpop sp sum-{s})?",
              f"sum-{s} ::= prod-{s} (sp [-+] sp prod-{s})*",
              f"prod-{s} ::= unary-{s} (sp [*/] sp unary-{s})*",
              f'unary-{s} ::= ([-+!] sp)? (cast sp)? prim-{s}',
              f'prim-{s} ::= num | name-{s} | "(" sp expr-{s} sp ")" | "static_cast<float>(" sp expr-{s} sp ")" | '
              f'fn1 sp "(" sp expr-{s} sp ")" | fn2 sp "(" sp expr-{s} sp "," sp expr-{s} sp ")" | '
              f'fn3 sp "(" sp expr-{s} sp "," sp expr-{s} sp "," sp expr-{s} sp ")"']
    return rules + ([f"lval-{s} ::= {_alts(writes)}"] if writes else [])


# ---- Triton ------------------------------------------------------------------------------------

def triton_reads(sc: Scaffold) -> tuple[str, ...]:
    """The names a Triton region may read: its inputs, y, and a row segment's mask, length and row
    index. The rest of the kernel around it (pointers, offsets, the block size) is the skeleton's."""
    seg = sc.segment
    assert seg is not None
    return tuple(a.name for a in seg.args) + ("y",) + (("mask", "cols", "row") if seg.kind == SegmentKind.ROW else ())


_PYTHON_OK = frozenset({"tl", "triton", "math", "float", "int", "abs", "min", "max", "range", "True", "False", "None"})


def skeleton_names_read(sc: Scaffold, region: str) -> list[str]:
    """The names a Triton region reads that are neither its own (assigned in it), nor what it may
    read (triton_reads), nor a module or builtin: the skeleton's locals around it (x_ptr, offs,
    BLOCK, ...). Such a region is right only inside the skeleton it was checked in: a line of a
    composed region that reads them reads the composed kernel's, which mean something else (on an
    H100, `tl.load(x_ptr + offs, ...)` passed its line's check and broke every composition of
    an RMSNorm). C++ and CUDA: the skeleton's pointers (`x_ptr[i]`), which no region's interface
    has (inputs are read as `x` or `x(j)`); their other names are left to the pre-check. [] for a
    region that does not parse (its check says why)."""
    import ast
    import re

    if sc.segment is None:
        return []
    if sc.language != "python":
        return sorted(set(re.findall(r"(?<![\w.>:])([A-Za-z_]\w*_ptr)\b", re.sub(r"//[^\n]*|/\*.*?\*/", "", region,
                                                                                  flags=re.S))))
    try:
        tree = ast.parse(region)
    except SyntaxError:
        return []
    own = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    # `mask` means the valid lanes in every Triton skeleton (elements or a row's columns), composed
    # ones included: reading it is harmless, though the grammar leaves it out of elementwise regions
    allowed = own | set(triton_reads(sc)) | _PYTHON_OK | {"mask"}
    return sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                   and n.id not in allowed})


def _triton(sc: Scaffold) -> str:
    seg = sc.segment
    assert seg is not None
    row = seg.kind == SegmentKind.ROW
    reads = triton_reads(sc)
    fns = {n: tuple(f"tl.{f}" for f in names) for n, names in TRITON_FUNCTIONS.items()}
    rules = [f'root ::= {lit("```" + sc.language)} "\\n" gap stmts1-0 "```"',
             # Python: one statement a line at column 0 (the splicer dedents; mixed indents would not
             # parse); blank and comment lines between them
             'sp ::= [ \\t]{0,4}',
             'gap ::= ([ \\t]* ("#" [^\\n]*)? "\\n"){0,12}',
             'eol ::= sp ("#" [^\\n]*)? "\\n"',
             'num ::= ([0-9]{1,24} ("." [0-9]{0,24})? | "." [0-9]{1,24}) ([eE] [-+]? [0-9]{1,3})?',
             'aop ::= "=" | "+=" | "-=" | "*=" | "/="',
             'cmpop ::= "<=" | ">=" | "==" | "!=" | "<" | ">"',
             'inf ::= "float(\'inf\')" | "float(\\"inf\\")"']
    rules += [f"fn{n} ::= {_alts(names)}" for n, names in fns.items()]
    if row:
        rules.append(f"red ::= {_alts(tuple(f'tl.{r}' for r in TRITON_REDUCTIONS))}")
    for k in range(MAX_LOCALS + 1):
        locals_ = tuple(local_name(i) for i in range(k))
        decl = f'{lit(local_name(k))} sp "=" sp expr-{k} eol gap stmts-{k + 1}' if k < MAX_LOCALS else ""
        reduce = f' | red "(" sp expr-{k} sp "," sp "axis" sp "=" sp "0" sp ")"' if row else ""
        rules += [f"stmts-{k} ::= (stmt-{k} eol gap)*" + (f" ({decl})?" if decl else ""),
                  f"stmts1-{k} ::= stmt-{k} eol gap stmts-{k}" + (f" | {decl}" if decl else ""),
                  f"stmt-{k} ::= lval-{k} sp aop sp expr-{k}",
                  f"lval-{k} ::= {_alts(('y',) + locals_)}",
                  f"name-{k} ::= {_alts(reads + locals_)}",
                  f'expr-{k} ::= cmp-{k} (sp [&|] sp cmp-{k})*',
                  f"cmp-{k} ::= sum-{k} (sp cmpop sp sum-{k})?",
                  f"sum-{k} ::= prod-{k} (sp [-+] sp prod-{k})*",
                  f"prod-{k} ::= unary-{k} (sp [*/] sp unary-{k})*",
                  f"unary-{k} ::= ([-+] sp)? prim-{k}",
                  f'prim-{k} ::= num | inf | name-{k} | "(" sp expr-{k} sp ")" | fn1 "(" sp expr-{k} sp ")" | '
                  f'fn2 "(" sp expr-{k} sp "," sp expr-{k} sp ")" | '
                  f'fn3 "(" sp expr-{k} sp "," sp expr-{k} sp "," sp expr-{k} sp ")"{reduce}']
    return "\n".join(rules) + "\n"
