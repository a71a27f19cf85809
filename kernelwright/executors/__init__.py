"""Where evaluations run: base.py (the Executor protocol, `make_executor`), pool.py (an EvalPool
of sandboxed evaluations on this machine), dedupe.py (identical candidates judged once), ray.py (a
Ray cluster; imported only when asked for).
"""
