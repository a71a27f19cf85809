"""Grounding: lint a candidate against the APIs actually installed (torch, Triton, the C++ and CUDA
headers) and apply the deterministic repairs; the strategies run it before evaluation, the
evaluator never does (`kernelwright eval` judges exactly the file it is given).

    ground.py        the pass over one candidate: findings and repairs (`ground`)
    rule.py          what a rule is and how findings are recorded
    python_rules.py, source_rules.py, ext_rules.py, calls.py, kernels.py, cxx.py, literals.py
                     the rules, by the language and layer they read
    env.py           what is installed, probed once per process (+ triton_names.json)
    text.py          shared text helpers
"""
