"""Grounding rules on the load_inline call itself: its arguments against the installed signature, and
which source goes where (C++ declarations in cpp_sources, CUDA in cuda_sources).

Each `rule_*` is one pass (see grounding.RULES). Python-level changes rewrite the call's argument
list, keeping its layout; anything ambiguous is reported, not guessed.
"""

from __future__ import annotations

import ast
import difflib
import keyword
import re
from typing import Optional

from kernelwright.grounding import env
from kernelwright.grounding.calls import (
    CODE_LIKE,
    SOURCE_KEYS,
    InlineCall,
    Item,
    call_items,
    functions_arg,
    inline_calls,
    insert_keyword,
    looks_like_code,
    rebuild,
    sources,
)
from kernelwright.grounding.cxx import is_cuda
from kernelwright.grounding.rule import Pass
from kernelwright.grounding.text import Edit

BY_CONTENT = "<by content>"
# Keywords small models give load_inline, and the real parameter each one means. BY_CONTENT: decide
# from the code itself (CUDA markers -> cuda_sources, otherwise cpp_sources).
KEYWORD_ALIASES: dict[str, str] = {
    **dict.fromkeys(("sources", "source", "src", "srcs", "code", "source_code", "kernel_source", "kernel_sources",
                     "kernel_code", "inline_sources", "inline_source"), BY_CONTENT),
    **dict.fromkeys(("cuda_source", "cuda_src", "cuda_srcs", "cuda_code", "cuda_kernel", "cuda_kernels", "cu_sources",
                     "cuda_sources_list", "cuda_source_code", "cuda_kernel_source"), "cuda_sources"),
    **dict.fromkeys(("cpp_source", "cpp_src", "cpp_srcs", "cpp_code", "cxx_sources", "cxx_source",
                     "cpp_sources_list", "cpp_source_code"), "cpp_sources"),
    **dict.fromkeys(("function", "func", "funcs", "function_names", "function_name", "exports", "functions_list"),
                    "functions"),
    **dict.fromkeys(("module_name", "ext_name", "extension_name"), "name"),
    **dict.fromkeys(("extra_cuda_flags", "cuda_flags", "cuda_cflags", "nvcc_flags", "extra_nvcc_flags",
                     "extra_cuda_cflag"), "extra_cuda_cflags"),
    **dict.fromkeys(("extra_cflag", "cflags", "cxx_flags", "extra_cxx_flags", "extra_cpp_flags"), "extra_cflags"),
    **dict.fromkeys(("ldflags", "extra_link_args", "extra_ldflag"), "extra_ldflags"),
    **dict.fromkeys(("include_dirs", "include_paths", "extra_include_dirs", "extra_include_path"),
                    "extra_include_paths"),
    "build_dir": "build_directory",
}
_FILE_NAME = re.compile(r"\s*[\w./-]+\.(?:cpp|cc|cxx|cu|cuh|h|hpp|c)\s*")


def rule_keywords(p: Pass) -> None:
    """Arguments checked against the installed load_inline signature; invented keywords mapped."""
    for call in inline_calls(p):
        if call.starred:
            p.problem("load_inline_keywords", "load_inline(*args/**kwargs) cannot be checked before it runs",
                      p.at(call.node), "warning")
            continue
        items = call_items(p.code, call.node)
        new = _fix_items(p, call, items)
        if new is not None:
            p.edits.append(rebuild(p.code, call.node, new))


def _fix_items(p: Pass, call: InlineCall, items: list[Item]) -> Optional[list[Item]]:
    rule, at, changed = "load_inline_keywords", p.at(call.node), False
    version = env.torch_version()
    params = env.load_inline_parameters()
    sources_moved = _positional_sources(p, call, items)
    if sources_moved is not None:
        items, changed = sources_moved, True
    out: list[Item] = []
    for item in items:
        if item.key is None or item.key in params:
            out.append(item)
            continue
        target = KEYWORD_ALIASES.get(item.key)
        value = item.node.value if isinstance(item.node, ast.keyword) else None
        if target == BY_CONTENT and value is not None:
            split = _split_by_content(p, value)
            if split is None:
                p.problem(rule, f"load_inline has no `{item.key}=` (torch {version}); pass C++ declarations as "
                          "cpp_sources= and CUDA code as cuda_sources=", at)
                out.append(item)
                continue
            out += split
            p.repaired(rule, f"load_inline has no `{item.key}=` (torch {version}): "
                       + ", ".join(f"{s.key}={s.text}" for s in split) + " (decided by content)", at)
            changed = True
        elif target in params and (target not in SOURCE_KEYS or (value is not None and p.resolver.sources(value))):
            out.append(Item(target, item.text, item.node))
            p.repaired(rule, f"load_inline has no `{item.key}=` (torch {version}); renamed to `{target}=`", at)
            changed = True
        elif _typo_of(item.key, params):
            fixed = _typo_of(item.key, params)
            out.append(Item(fixed, item.text, item.node))
            p.repaired(rule, f"load_inline has no `{item.key}=` (torch {version}); `{fixed}=` is the parameter "
                       "of that spelling", at)
            changed = True
        elif value is not None and _holds_code(p, value):
            p.problem(rule, f"load_inline has no `{item.key}=` (torch {version}); pass the code as cpp_sources= "
                      "(C++ declarations) or cuda_sources= (CUDA)", at)
            out.append(item)
        else:
            p.repaired(rule, f"load_inline has no `{item.key}=` (torch {version}); dropped it", at)
            changed = True
    keys = [i.key for i in out if i.key]
    if len(keys) != len(set(keys)):
        p.problem(rule, "after mapping invented keywords, a load_inline parameter is given twice: "
                  + ", ".join(sorted({k for k in keys if keys.count(k) > 1})), at)
        return None
    named = _ensure_name(p, call, out)
    listed = _functions_as_list(p, call, out)
    if changed or named or listed:
        return out
    return None


def _typo_of(key: str, params: tuple[str, ...]) -> Optional[str]:
    """The one real parameter `key` is a misspelling of (`cp_sources`, `functons`), if exactly one."""
    close = difflib.get_close_matches(key, params, n=2, cutoff=0.85)
    return close[0] if len(close) == 1 else None


def _holds_code(p: Pass, value: ast.expr) -> bool:
    """Strings that look like any C++ at all: a keyword holding them is never dropped silently."""
    res = p.resolver.sources(value)
    return bool(res) and any(CODE_LIKE.search(r.text) for r in res)


def _positional_sources(p: Pass, call: InlineCall, items: list[Item]) -> Optional[list[Item]]:
    """`load_inline(cuda_src, cpp_src, ...)`: sources where the name belongs. Each leading positional
    that is code goes to cuda_sources or cpp_sources by its content."""
    positional = [i for i in items if i.key is None]
    if not positional or not looks_like_code(p, positional[0].node):  # type: ignore[arg-type]
        return None
    lead = []
    for item in positional:
        if not looks_like_code(p, item.node):  # type: ignore[arg-type]
            break
        lead.append(item)
    if len(lead) < len(positional):
        p.problem("load_inline_keywords", "load_inline's first parameter is `name`; the sources were passed "
                  "positionally and are followed by more positional arguments: use keywords", p.at(call.node))
        return None
    groups: dict[str, list[str]] = {"cpp_sources": [], "cuda_sources": []}
    for item in lead:
        res = p.resolver.sources(item.node) or []  # type: ignore[arg-type]
        groups["cuda_sources" if any(is_cuda(r.text) for r in res) else "cpp_sources"].append(item.text)
    if any(i.key in groups and groups[i.key] for i in items):
        p.problem("load_inline_keywords", "sources were passed positionally and as keywords", p.at(call.node))
        return None
    new = [Item(k, v[0] if len(v) == 1 else "[" + ", ".join(v) + "]") for k, v in groups.items() if v]
    if not groups["cpp_sources"]:
        new.insert(0, Item("cpp_sources", '""'))
    p.repaired("load_inline_keywords", "load_inline's first parameter is `name`, not code; the positional sources "
               "became " + ", ".join(i.render() for i in new), p.at(call.node))
    return new + [i for i in items if i.key is not None]


def _split_by_content(p: Pass, value: ast.expr) -> Optional[list[Item]]:
    res = p.resolver.sources(value)
    if not res or not all(r.complete for r in res):
        return None
    container = p.resolver.container(value)
    cuda = [r for r in res if is_cuda(r.text)]
    cpp = [r for r in res if not is_cuda(r.text)]
    if container is None:  # one string
        return [Item("cuda_sources" if cuda else "cpp_sources", p.code.segment(value))]
    out = []
    for key, group in (("cpp_sources", cpp), ("cuda_sources", cuda)):
        if group:
            out.append(Item(key, "[" + ", ".join(p.code.segment(r.expr) for r in group) + "]"))
    return out


def _ensure_name(p: Pass, call: InlineCall, items: list[Item]) -> bool:
    named = next((i for i in items if i.key == "name"), None)
    if named is None and items and items[0].key is None:
        named = items[0]  # the first positional is the name
    if named is None:
        funcs = functions_arg(p, call)
        base = funcs.names[0] if funcs.kind == "names" and funcs.names else "kw_inline"
        name = _identifier(f"{base}_ext")
        items.insert(0, Item("name", repr(name)))
        p.repaired("load_inline_keywords", f"load_inline requires `name=`; added name={name!r}", p.at(call.node))
        return True
    node = named.node.value if isinstance(named.node, ast.keyword) else named.node
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and not node.value.isidentifier():
        fixed = _identifier(node.value)
        named.text = repr(fixed)
        p.repaired("load_inline_keywords", f"the extension name {node.value!r} is not a Python identifier (it becomes "
                   f"the module name); renamed to {fixed!r}", p.at(node))
        return True
    return False


def _identifier(text: str) -> str:
    name = re.sub(r"\W", "_", text).strip("_") or "kw_inline_ext"
    name = "_" + name if name[0].isdigit() else name
    return name + "_" if keyword.iskeyword(name) else name


def _functions_as_list(p: Pass, call: InlineCall, items: list[Item]) -> bool:
    """`functions="f"` -> `["f"]`; `functions=[f]` with `f` unbound in Python -> `["f"]`."""
    item = next((i for i in items if i.key == "functions"), None)
    if item is None or not isinstance(item.node, ast.keyword):
        return False
    value = item.node.value
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        names = [n for n in re.split(r"[,\s]+", value.value) if n]
        if names and all(n.isidentifier() for n in names):
            item.text = "[" + ", ".join(repr(n) for n in names) + "]"
            p.repaired("load_inline_keywords", f"functions= must be a list of names: {item.text}", p.at(value))
            return True
    if isinstance(value, (ast.List, ast.Tuple)) and value.elts and all(isinstance(e, (ast.Name, ast.Constant))
                                                                        for e in value.elts):
        unbound = [e for e in value.elts if isinstance(e, ast.Name) and p.is_unbound(e.id)]
        if unbound and all(isinstance(e, ast.Name) and e in unbound or isinstance(e, ast.Constant)
                           and isinstance(e.value, str) for e in value.elts):
            item.text = "[" + ", ".join(repr(e.id) if isinstance(e, ast.Name) else p.code.segment(e)
                                        for e in value.elts) + "]"
            p.repaired("load_inline_keywords", "functions= lists names of C++ functions as strings; Python names "
                       f"that are not defined were quoted: {item.text}", p.at(value))
            return True
    return False


def rule_misuse(p: Pass) -> None:
    for call in inline_calls(p):
        at = p.at(call.node)
        if call.decorator:
            p.problem("load_inline_misuse", "load_inline builds and returns an extension module; it is not a "
                      "decorator. Call it once at module level: `ext = load_inline(name=..., cpp_sources=..., "
                      "cuda_sources=..., functions=[...])`", at)
        elif call.in_function:
            p.problem("load_inline_misuse", "load_inline is called inside a function, so it builds (or at least "
                      "re-loads) on every call; build once at module level and keep the returned module",
                      at, "warning")
        for key in SOURCE_KEYS:
            for res in sources(p, call, key) or []:
                text = res.text
                if res.complete and _FILE_NAME.fullmatch(text):
                    p.problem("load_inline_misuse", f"{key} holds the file name {text.strip()!r}, but load_inline "
                              "compiles the strings it is given as code; put the C++/CUDA code itself in the string",
                              p.at(res.expr))
                elif res.complete and text.strip() and not CODE_LIKE.search(text):
                    p.problem("load_inline_misuse", f"{key} holds {text.strip()[:40]!r}, which is not C++ code",
                              p.at(res.expr))


def rule_duplicate_sources(p: Pass) -> None:
    """The same source text twice in one list is a redefinition of everything in it: keep one."""
    for call in inline_calls(p):
        for key in SOURCE_KEYS:
            expr = call.bound.get(key)
            container = p.resolver.container(expr) if expr is not None else None
            res = sources(p, call, key)
            if container is None or not res or len(res) != len(container.elts):
                continue
            seen: dict[str, int] = {}
            drop: set[int] = set()
            for i, r in enumerate(res):
                if not r.complete or not CODE_LIKE.search(r.text):
                    continue  # names or file names repeated are a different mistake (rule_misuse says so)
                if r.text in seen:
                    first = seen[r.text]
                    keep = i if _prefers(res[i].expr, key) and not _prefers(res[first].expr, key) else first
                    drop.add(first if keep == i else i)
                    seen[r.text] = keep
                else:
                    seen[r.text] = i
            if drop:
                kept = [p.code.segment(e) for i, e in enumerate(container.elts) if i not in drop]
                start, end = p.code.span(container)
                open_, close = ("[", "]") if isinstance(container, ast.List) else ("(", ",)" if len(kept) == 1 else ")")
                p.edits.append(Edit(start, end, open_ + ", ".join(kept) + close))
                p.repaired("source_placement", f"{key} listed the same source {len(drop) + 1} times (each copy "
                           "redefines its functions); kept one", p.at(container))


def _prefers(expr: ast.expr, key: str) -> bool:
    return isinstance(expr, ast.Name) and key.split("_")[0] in expr.id.lower()


def rule_placement(p: Pass) -> None:
    """CUDA code belongs in cuda_sources (nvcc); cpp_sources is compiled by the host C++ compiler."""
    for call in inline_calls(p):
        if call.starred:
            continue
        cpp, cuda = sources(p, call, "cpp_sources"), sources(p, call, "cuda_sources")
        if cpp is None or cuda is None:
            continue
        at = p.at(call.node)
        cpp_cuda = any(is_cuda(r.text) for r in cpp)
        cuda_cuda = any(is_cuda(r.text) for r in cuda)
        has_cuda = any(r.text.strip() for r in cuda) or not all(r.complete for r in cuda)
        items = call_items(p.code, call.node)
        by_key = {i.key: i for i in items if i.key}
        if cpp_cuda and p.target == "cpp":
            p.problem("source_placement", "the target is CPU C++, but cpp_sources holds CUDA code (__global__, "
                      "threadIdx, <<<...>>>); write plain C++ (loops over the data)", at)
        elif cpp_cuda and not has_cuda and p.target == "cuda" and "cpp_sources" in by_key:
            by_key["cpp_sources"].key = "cuda_sources"
            items = [i for i in items if i.key != "cuda_sources" or i is by_key["cpp_sources"]]
            items.insert(items.index(by_key["cpp_sources"]), Item("cpp_sources", '""'))
            p.edits.append(rebuild(p.code, call.node, items))
            p.repaired("source_placement", "the CUDA code was in cpp_sources (compiled by the host C++ compiler, "
                       "which rejects __global__); moved it to cuda_sources", at)
        elif cpp_cuda and has_cuda and not cuda_cuda and "cpp_sources" in by_key and "cuda_sources" in by_key:
            cpp_item, cuda_item = by_key["cpp_sources"], by_key["cuda_sources"]
            cpp_item.text, cuda_item.text = cuda_item.text, cpp_item.text
            p.edits.append(rebuild(p.code, call.node, items))
            p.repaired("source_placement", "cpp_sources and cuda_sources were swapped (the CUDA code was in "
                       "cpp_sources); swapped them back", at)
        elif cpp_cuda:
            p.problem("source_placement", "cpp_sources is compiled by the host C++ compiler, which does not know "
                      "CUDA (__global__, threadIdx, <<<...>>>); put kernels and their launchers in cuda_sources and "
                      "only declarations (prototypes) of the exported host functions in cpp_sources", at)
        elif has_cuda and "cpp_sources" not in call.bound and "cpp_sources" not in by_key:
            insert_keyword(items, Item("cpp_sources", '""'))
            p.edits.append(rebuild(p.code, call.node, items))
            p.repaired("source_placement", "load_inline requires cpp_sources; added an empty one (prototypes of the "
                       "exported functions are added to it next)", at)
