"""Our own notes on writing kernels, and BM25 retrieval over them (see `retrieval`).

Importing this package is cheap: bm25s and PyStemmer load on the first search.
"""

from kernelwright.knowledge.retrieval import Brief, Hit, Note, Source, brief, notes, search

__all__ = ["Brief", "Hit", "Note", "Source", "brief", "notes", "search"]
