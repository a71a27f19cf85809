"""How a forward is fed, compared and timed: the judge's input draws (draw.py), output comparison
(compare.py) and timing loop (timing.py, timing_policy.py). Below analysis and the scaffold, which
use the same draws and clock as the evaluator so their numbers mean the same thing.
"""
