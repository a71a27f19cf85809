"""search: many samples of one region against a fast exact check; build only what survives.

Small models are weak at whole programs and decent at small checked pieces, and they improve most
when they can try many times against an exact check. One turn:

1. n answers for the region in one backend request (llama.cpp evaluates the prompt once for all n),
   constrained to the region's language where the backend can apply a grammar (scaffold/grammar.py:
   a fenced block of statements over the names in scope and the target's real math functions, so
   a prose answer or an undefined name cannot be sampled), each spliced into the scaffold;
2. duplicates dropped: regions equal after whitespace normalisation are one candidate;
3. every distinct region pre-checked in milliseconds (scaffold/precheck.py: the region's math
   alone, compiled without torch and run on probe values with edge cases, against PyTorch);
4. the survivors built and evaluated best first — the region most samples agree on first, since
   agreement among independent samples is evidence — until one is a correct custom kernel
   (at most MAX_BUILDS a turn: a build costs 20-60 s, a pre-check milliseconds). Where the target
   builds an extension (CUDA, C++), the turn's survivors share one: every region's kernel in one
   source, a program per region (scaffold.shared_programs), so the first evaluation's build serves
   the rest; if that build fails, each region is built on its own;
5. once one is correct, speed: the verified kernel is timed under the skeleton's other launch
   settings (same region, same extension: no build, no tokens), each variant verified in full, so
   the pick keeps the fastest correct one (+no_tune switches it off);
6. when none is correct, the next turn answers the model's failing region with its concrete
   counterexample or compiler error, as a follow-up in the same conversation (so the kernel and
   where the region goes stay in view), and samples again.

Every sample becomes an Attempt: a pre-check failure gets the verdict the evaluator would give
(wrong_output for a counterexample, compile_error / hallucinated_api for a compiler error) with
one `precheck` stage and no build; a duplicate carries its twin's verdict; a pre-check pass left
unbuilt because a correct kernel was already found is `not_built`. Each attempt's
notes["search"] says which (drawn, distinct, pre-check result, built) and whether the answer was
sampled under the grammar (`constrained`: the backend says, per answer).

Ablations, each part switched off on its own so a study shows what it buys: +no_precheck (build
every distinct sample, in sampling order), +no_repair (every turn samples the base prompt again,
with a new seed), +no_shared_build (each survivor its own extension), +no_tune (no launch variants
after a verified kernel), +grammar (answers constrained to the region's language: off by default,
it bought no pre-check passes for 2.4x the generation time, docs/results/grammar-yield.md), +n=K,
+no_steps (an elementwise region of several lines is sampled whole instead of a line at a time,
steps.py), +no_parts (a line at a time, but a composite op's line, softplus or a softmax, one
line rather than its definition's lines: scaffold/decompose.py).
A task without a scaffold gets whole programs: n a turn, every one built (nothing to pre-check).
"""

from __future__ import annotations

from kernelwright.strategies.base import RunContext

DEFAULT_N = 8
DEFAULT_TURNS = 4
DEFAULT_TEMPERATURE = 0.7  # diverse enough that n samples are not n copies, low enough to stay on task


def run(ctx: RunContext) -> None:
    """The regime's entry point (strategies.REGIMES)."""
    from kernelwright.strategies.search.region import search_region
    from kernelwright.strategies.search.steps import search_lines

    c = ctx.config
    n = c.n or DEFAULT_N
    turns = c.turns or DEFAULT_TURNS
    temperature = DEFAULT_TEMPERATURE if c.temperature is None else c.temperature
    # an elementwise region of several lines: each line sampled and checked on its own first
    # (steps.py); the whole region is sampled where that does not apply
    if search_lines(ctx, n, turns, temperature) is None:
        search_region(ctx, n, turns, temperature)
