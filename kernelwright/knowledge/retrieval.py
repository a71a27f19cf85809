"""BM25 retrieval over our own notes, for the agentic regime's retrieval researcher.

The corpus is `kernelwright/knowledge/notes/*.md`: short notes we wrote ourselves, each with a
front matter (`title:`, `tags:`) and `##` sections. A note is indexed section by section, because a
small model's prompt has room for a few sections, not for whole notes; each chunk also carries its
note's title and tags so that a query naming the topic finds every section of it.

    search(query, k)          -> the k best sections for one query (`Hit`s)
    brief(queries, ...)       -> the best sections for several queries, de-duplicated, fused,
                                 trimmed to a character budget, each headed `[n] title › section`
                                 so that the generator can cite `[n]`; `Brief.sources` lists them
    notes()                   -> the corpus

Everything is deterministic: the same notes and queries give the same hits in the same order
(equal scores are ordered by note id, then by section position). The index is built once per
process and per notes folder.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from pydantic import BaseModel, ConfigDict

log = logging.getLogger(__name__)

NOTES_DIR = Path(__file__).parent / "notes"

# Reciprocal-rank fusion constant: the usual 60, so that a section found by two queries outranks
# a section found first by one, and a query's first hit outranks another query's third.
_RRF_K = 60
# A budget remainder smaller than this is not worth a cut-down excerpt (a header and two lines).
_MIN_TRIMMED_EXCERPT = 300
_TRIM_MARKER = "[…]"
# Scores are rounded before comparison so that float noise cannot reorder equal scores.
_SCORE_DECIMALS = 6

# Words that carry no topic. Kept short and our own: BM25's idf already discounts common words,
# this only stops "how do I write a" from matching every note a little.
_STOPWORDS = frozenset(
    """a an and are as at be but by can do does for from has have how i if in into is it its of on or
    so than that the their then there these this to use used using was we what when where which
    while who why will with without you your""".split()
)

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_FENCE = re.compile(r"^\s*```")


class NoteFormatError(ValueError):
    """A note file without the front matter or title that the corpus requires."""


class Section(BaseModel):
    model_config = ConfigDict(frozen=True)

    note_id: str
    position: int  # 0, 1, 2, ... in file order
    title: str  # the `##` heading ("Overview" for a note without headings)
    text: str  # the section's markdown without its heading


class Note(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str  # the file name without `.md`
    title: str
    tags: tuple[str, ...]
    path: str
    body: str  # everything after the front matter
    sections: tuple[Section, ...]

    @property
    def words(self) -> int:
        return len(self.body.split())


class Hit(BaseModel):
    model_config = ConfigDict(frozen=True)

    note_id: str
    title: str  # the note's title
    section: str  # the section's heading
    score: float  # BM25 score for `search`; the fused score for hits inside a `Brief`
    text: str
    position: int = 0  # the section's place in its note (ties and stable ordering)


class Source(BaseModel):
    """One cited note: `[n]` in `Brief.text` refers to the note with this `n`."""

    model_config = ConfigDict(frozen=True)

    n: int
    note_id: str
    title: str

    def __str__(self) -> str:
        return f"[{self.n}] {self.note_id}: {self.title}"


class Brief(BaseModel):
    model_config = ConfigDict(frozen=True)

    queries: list[str]
    text: str  # excerpts, each headed `[n] title › section`, at most `max_chars` characters
    sources: list[Source]  # the notes cited in `text`, by `n`
    hits: list[Hit]  # the excerpts in `text`, in order (a trimmed one with its trimmed text)


# --- the corpus --------------------------------------------------------------------------------


def _parse_front_matter(text: str, path: Path) -> tuple[dict[str, str], str]:
    """`---` / `key: value` lines / `---`, then the body. Only `title` and `tags` are read; we
    parse by hand because the front matter is two lines and YAML is not a dependency."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise NoteFormatError(f"{path.name}: a note starts with a '---' front matter")
    for end in range(1, len(lines)):
        if lines[end].strip() == "---":
            break
    else:
        raise NoteFormatError(f"{path.name}: the front matter has no closing '---'")
    meta: dict[str, str] = {}
    for line in lines[1:end]:
        key, sep, value = line.partition(":")
        if sep:
            meta[key.strip().lower()] = value.strip()
    return meta, "".join(lines[end + 1:])


def _parse_tags(raw: str) -> tuple[str, ...]:
    raw = raw.strip()
    if raw.startswith("[") and raw.endswith("]"):
        raw = raw[1:-1]
    return tuple(t.strip().strip("'\"") for t in raw.split(",") if t.strip())


def _split_sections(note_id: str, body: str) -> tuple[Section, ...]:
    """Sections at `## ` headings outside code fences (a `## ` line inside a fenced block is code,
    e.g. a Python comment, and must not start a section).

    The text before the first heading is the note's introduction: it joins the first section
    rather than standing alone, because on its own it is short (so BM25 ranks it high) and says
    little (so it wastes the brief's budget)."""
    chunks: list[tuple[str, str]] = []
    title, buf, in_fence = "Overview", [], False
    for line in body.splitlines(keepends=True):
        if _FENCE.match(line):
            in_fence = not in_fence
        if not in_fence and line.startswith("## "):
            chunks.append((title, "".join(buf).strip("\n")))
            title, buf = line[3:].strip(), []
            continue
        buf.append(line)
    chunks.append((title, "".join(buf).strip("\n")))
    intro = chunks[0][1]
    rest = [(t, x) for t, x in chunks[1:] if x.strip()]
    if rest and intro.strip():
        rest[0] = (rest[0][0], intro + "\n\n" + rest[0][1])
    elif not rest and intro.strip():
        rest = [("Overview", intro)]
    return tuple(Section(note_id=note_id, position=i, title=t, text=x) for i, (t, x) in enumerate(rest))


def load_note(path: Path) -> Note:
    meta, body = _parse_front_matter(path.read_text(encoding="utf-8"), path)
    title = meta.get("title", "").strip()
    if not title:
        raise NoteFormatError(f"{path.name}: the front matter has no title")
    note_id = path.stem
    return Note(id=note_id, title=title, tags=_parse_tags(meta.get("tags", "")), path=str(path),
                body=body, sections=_split_sections(note_id, body))


@functools.lru_cache(maxsize=8)
def _load_notes(notes_dir: str) -> tuple[Note, ...]:
    paths = sorted(Path(notes_dir).glob("*.md"))
    return tuple(load_note(p) for p in paths)


def notes(notes_dir: Optional[Path] = None) -> list[Note]:
    """The corpus, ordered by note id."""
    return list(_load_notes(str(notes_dir or NOTES_DIR)))


# --- tokens ------------------------------------------------------------------------------------


# import name -> pip name: what retrieval needs besides pydantic
_NEEDS = {"bm25s": "bm25s", "Stemmer": "PyStemmer"}


def missing() -> list[str]:
    """The pip names of retrieval's dependencies that this Python cannot import. Cheap (nothing is
    imported): callers check it before loading a model, so a regime that retrieves fails in its first
    second instead of after minutes of model loading and profiling."""
    return [pip for mod, pip in _NEEDS.items() if importlib.util.find_spec(mod) is None]


def _import_bm25s() -> Any:
    """bm25s, without JAX. When JAX is installed, bm25s runs a JAX op at import, which makes JAX
    reserve 75 % of the GPU's memory in this process (on the H200: an attempt to allocate 104.85 GiB
    next to the kernels being evaluated). Retrieval over a few hundred sections needs no GPU, so
    `import jax` is made to fail while bm25s loads and it takes its numpy path. A process that already
    imported JAX itself keeps it."""
    if "bm25s" in sys.modules or "jax" in sys.modules:
        import bm25s
        return bm25s
    sys.modules["jax"] = None  # type: ignore[assignment]  # `import jax...` now raises ImportError
    try:
        import bm25s
    finally:
        if sys.modules.get("jax", 0) is None:
            del sys.modules["jax"]
    return bm25s


@functools.lru_cache(maxsize=1)
def _stemmer() -> Any:
    try:
        import Stemmer  # PyStemmer
    except ImportError as e:  # a hard dependency: without it, scores would differ between machines
        raise ImportError("kernelwright.knowledge needs PyStemmer: pip install PyStemmer") from e
    return Stemmer.Stemmer("english")


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens for BM25, made for prose mixed with code.

    An identifier is kept whole (`load_inline`, `shfl_down_sync`, `data_ptr`) and also split into
    its parts (`load`, `inline`; `getCurrentCUDAStream` -> `get`, `current`, `cuda`, `stream`), so
    both "load_inline" and "load inline" match. Plain words are stemmed (Snowball English) so that
    "reductions" meets "reduction"; whole identifiers are not, they are names.
    """
    stem = _stemmer().stemWord
    out: list[str] = []
    for word in _WORD.findall(text):
        core = word.strip("_")
        if not core:
            continue
        parts = [p for chunk in core.split("_") for p in _CAMEL.findall(chunk)]
        lowered = core.lower()
        if len(parts) > 1:
            out.append(lowered)  # the identifier itself
        for part in parts if len(parts) > 1 else [core]:
            p = part.lower()
            if len(p) < 2 or p in _STOPWORDS:
                continue
            out.append(p if p.isdigit() else stem(p))
    return out


# --- the index ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Index:
    sections: tuple[Section, ...]
    titles: dict[str, str]  # note id -> title
    retriever: Any  # bm25s.BM25


def _chunk_text(note: Note, section: Section) -> str:
    # Title and tags ride along with every section: they name the note's topic, which the
    # section's own text often only implies.
    return "\n".join([note.title, " ".join(note.tags), section.title, section.text])


@functools.lru_cache(maxsize=8)
def _build_index(notes_dir: str) -> _Index:
    try:
        bm25s = _import_bm25s()
    except ImportError as e:
        raise ImportError("kernelwright.knowledge needs bm25s: pip install bm25s") from e
    # bm25s logs its index building at DEBUG on the root handler a CLI may have set up: not ours to show
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    started = time.perf_counter()
    corpus = _load_notes(notes_dir)
    sections = tuple(s for n in corpus for s in n.sections)
    by_id = {n.id: n for n in corpus}
    tokens = [tokenize(_chunk_text(by_id[s.note_id], s)) for s in sections]
    retriever = bm25s.BM25()
    if sections:
        retriever.index(tokens, show_progress=False)
    log.debug("knowledge index: %d notes, %d sections in %.2f s", len(corpus), len(sections),
              time.perf_counter() - started)
    return _Index(sections=sections, titles={n.id: n.title for n in corpus}, retriever=retriever)


def _index(notes_dir: Optional[Path]) -> _Index:
    return _build_index(str(notes_dir or NOTES_DIR))


# --- search ------------------------------------------------------------------------------------


def search(query: str, k: int = 4, *, notes_dir: Optional[Path] = None) -> list[Hit]:
    """The k sections that best match `query` by BM25, best first; only sections that share at
    least one token with the query. Equal scores are ordered by note id, then section position."""
    index = _index(notes_dir)
    q = tokenize(query)
    if k <= 0 or not q or not index.sections:
        return []
    scores = index.retriever.get_scores(q)
    ranked = sorted(
        (i for i in range(len(index.sections)) if scores[i] > 0),
        key=lambda i: (-round(float(scores[i]), _SCORE_DECIMALS), index.sections[i].note_id,
                       index.sections[i].position),
    )
    hits = []
    for i in ranked[:k]:
        s = index.sections[i]
        hits.append(Hit(note_id=s.note_id, title=index.titles[s.note_id], section=s.title,
                        score=round(float(scores[i]), _SCORE_DECIMALS), text=s.text, position=s.position))
    return hits


@dataclass(frozen=True)
class _Ranked:
    hit: Hit  # with the fused score
    best_rank: int  # its best rank among the queries' own lists (1 = some query's top hit)


def _fuse(queries: Sequence[str], k_per_query: int, notes_dir: Optional[Path]) -> list[_Ranked]:
    """Reciprocal-rank fusion of each query's hits, one entry per section. BM25 scores of
    different queries are not on one scale; ranks are. Equal fused scores: the higher BM25
    score first, then note id, then section position."""
    fused: dict[tuple[str, int], float] = {}
    best: dict[tuple[str, int], Hit] = {}
    best_rank: dict[tuple[str, int], int] = {}
    for query in queries:
        for rank, hit in enumerate(search(query, k_per_query, notes_dir=notes_dir), start=1):
            key = (hit.note_id, hit.position)
            fused[key] = fused.get(key, 0.0) + 1.0 / (_RRF_K + rank)
            best_rank[key] = min(rank, best_rank.get(key, rank))
            if key not in best or hit.score > best[key].score:
                best[key] = hit
    order = sorted(fused, key=lambda key: (-round(fused[key], _SCORE_DECIMALS), -best[key].score, key[0], key[1]))
    return [_Ranked(best[key].model_copy(update={"score": round(fused[key], _SCORE_DECIMALS)}), best_rank[key])
            for key in order]


def _header(n: int, hit: Hit) -> str:
    return f"[{n}] {hit.title} › {hit.section}\n"


def _cut_points(lines: Sequence[str]) -> list[tuple[int, bool]]:
    """For each line i: whether the text may end after it, and whether a code fence is then open.

    Outside code any line end will do. Inside code only the end of a top-level construct: braces
    balanced, the next line not indented (C++ and Python alike) and the line itself not a comment,
    decorator or template head, nor inside a triple-quoted string, so that a cut never leaves half
    a function for a small model to copy."""
    points: list[tuple[int, bool]] = []
    in_fence, depth, in_string = False, 0, False
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            in_fence, depth, in_string = not in_fence, 0, False
        elif in_fence:
            depth += line.count("{") - line.count("}")
            # a Python triple-quoted string (C++/CUDA source inside a program) must not be left open
            in_string ^= (line.count('"""') + line.count("'''")) % 2 == 1
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        top_level_next = not nxt.strip() or not nxt[0].isspace() or bool(_FENCE.match(nxt))
        stripped = line.strip()
        # a comment, decorator or template head belongs to what follows it
        leads_on = stripped.startswith(("//", "/*", "# ", "@", "template"))
        points.append((i, in_fence))
        if in_fence and (in_string or not (depth == 0 and top_level_next and not leads_on)):
            points[-1] = (-1, in_fence)  # not a place to stop
    return points


def _trim(text: str, limit: int) -> Optional[str]:
    """At most `limit` characters of `text`, cut where `_cut_points` allows, with an open code fence
    closed and a marker that the excerpt was cut."""
    lines = [line if line.endswith("\n") else line + "\n" for line in text.splitlines(keepends=True)]
    best: Optional[str] = None
    length = 0
    for (i, fence_open), line in zip(_cut_points(lines), lines, strict=True):
        length += len(line)
        closing = "```\n" if fence_open else ""
        if length + len(closing) + len(_TRIM_MARKER) > limit:
            break
        if i < 0 or (fence_open and _FENCE.match(line)):  # never end on an opening fence
            continue
        best = "".join(lines[:i + 1]) + closing + _TRIM_MARKER
    return best


def _water_level(sizes: Sequence[int], budget: int) -> int:
    """The largest cap c with sum(min(size, c)) <= budget: small items keep their size, the large
    ones share what is left equally."""
    remaining, left = budget, len(sizes)
    for size in sorted(sizes):
        share = remaining // left
        if size > share:
            return share
        remaining -= size
        left -= 1
    return max(sizes, default=budget)


def brief(queries: Sequence[str], k_per_query: int = 3, max_chars: int = 4000, *,
          notes_dir: Optional[Path] = None) -> Brief:
    """The best sections for `queries`, de-duplicated, fused and trimmed to `max_chars`.

    Each excerpt is headed `[n] note title › section`; `n` numbers notes (not sections) in the
    order they first appear, so two sections of one note share a number, and `sources` lists the
    numbered notes.

    Every query's own best section comes first (so that no query goes unanswered), sharing the
    budget: short ones whole, long ones cut to an equal share. The other sections follow in fused
    order while they fit, one more cut to fill a remainder of at least a few lines.
    """
    queries = [q for q in queries if q and q.strip()]
    ranked = _fuse(queries, k_per_query, notes_dir)
    firsts = [r.hit for r in ranked if r.best_rank == 1]
    others = [r.hit for r in ranked if r.best_rank > 1]

    numbers: dict[str, int] = {}
    parts: list[str] = []
    kept: list[Hit] = []
    sep = "\n\n"

    def add(hit: Hit, limit: int) -> None:
        """Add `hit` in at most `limit` characters (its header and separator included)."""
        n = numbers.get(hit.note_id, len(numbers) + 1)
        head = (sep if parts else "") + _header(n, hit)
        room = min(limit, max_chars - sum(map(len, parts))) - len(head)
        if len(hit.text) <= room:
            body = hit.text
        elif room + len(head) >= _MIN_TRIMMED_EXCERPT:
            trimmed = _trim(hit.text, room)
            if trimmed is None:
                return
            body = trimmed
        else:
            return
        numbers.setdefault(hit.note_id, n)
        parts.append(head + body)
        kept.append(hit.model_copy(update={"text": body}))

    # Headers are about 80 characters and excerpts rarely share a note in the first pass, so a
    # header estimate with a fresh number is close enough for sharing the budget out.
    sizes = [len(sep) + len(_header(len(firsts), h)) + len(h.text) for h in firsts]
    cap = _water_level(sizes, max_chars)
    for hit in firsts:
        add(hit, cap)
    for hit in others:
        add(hit, max_chars)

    text = "".join(parts)
    assert len(text) <= max_chars, (len(text), max_chars)  # the budget is a promise to the prompt
    sources = [Source(n=n, note_id=note_id, title=_index(notes_dir).titles[note_id])
               for note_id, n in sorted(numbers.items(), key=lambda item: item[1])]
    log.debug("brief: %d queries -> %d excerpts from %d notes, %d chars", len(queries), len(kept),
              len(sources), len(text))
    return Brief(queries=list(queries), text=text, sources=sources, hits=kept)


def cache_clear() -> None:
    """Forget the loaded notes and the index (after notes change on disk in a long process)."""
    _load_notes.cache_clear()
    _build_index.cache_clear()
