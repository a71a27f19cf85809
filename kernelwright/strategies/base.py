"""The state every regime works on, and the candidate pipeline they all share.

generate (Backend) -> extract code -> grounding lint + repairs -> evaluate (sandbox) -> Attempt

Regimes are small compositions of `ctx.ask(...)` (a role's text answer) and
`ctx.candidates(...)` (n programs, each extracted, grounded, evaluated and logged). A regime that
runs the pipeline's steps in its own order (search: draw, check, build only some) uses them one by
one: `request` and `draw` (model calls, their usage counted), `prepare` (code and grounding of one
answer), `evaluate` / `evaluate_many` (the executor), `record` (the Attempt, logged).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

from kernelwright import prompts
from kernelwright.evaluate.config import EvalRun
from kernelwright.events import Asking, Evaluating, EventFn, Generating, Judged, NoScaffold
from kernelwright.executors.base import Direct, Executor
from kernelwright.extract import extract_code
from kernelwright.llm.base import Backend, ChatMessage, Completion, GenerationRequest
from kernelwright.records import Attempt, EvalResult, Stage, Task, Usage, Verdict, sha256_text
from kernelwright.strategies.config import RegimeConfig

if TYPE_CHECKING:
    from kernelwright.prompts.facts import PromptFacts
    from kernelwright.scaffold import Scaffold

log = logging.getLogger(__name__)

TARGET_NAMES = {"cuda": "CUDA", "triton": "Triton", "cpp": "C++ (CPU)"}

ProgressFn = EventFn  # events.py: what the regime reports as it goes


@dataclass
class RunContext:
    task: Task
    backend: Backend
    config: RegimeConfig
    eval_run: EvalRun  # how and where every candidate is evaluated
    cell_key: str
    sink: Callable[[Attempt], None] = lambda a: None  # called once per attempt, as it finishes
    progress: ProgressFn = lambda event: None
    attempts: list[Attempt] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    notes: dict[str, Any] = field(default_factory=dict)  # regime-level facts for the cell (route, ...)
    # Task -> TaskAnalysis. Injected so a study computes it once per task and a replayed test
    # uses the recorded one (profiler times differ run to run, and they appear in prompts).
    analysis_provider: Optional[Callable[[Task], Any]] = None
    # where candidates are evaluated (executors/): passed in by the command that runs the regime
    executor: Executor = field(default_factory=Direct)
    _analysis: Any = None
    _scaffold: Any = None  # False once looked up and absent

    def analysis(self) -> "PromptFacts":
        if self._analysis is None:
            from kernelwright.prompts.facts import PromptFacts, analyze_for_prompts

            provider = self.analysis_provider or (lambda t: analyze_for_prompts(t, self.eval_run.device))
            got = provider(self.task)
            self._analysis = got if isinstance(got, PromptFacts) else PromptFacts.from_analysis(got)
        return self._analysis

    def use_scaffold(self, sc: Optional["Scaffold"]) -> None:
        """Put `sc` in place of the task's own scaffold (a benchmark comparing what the model is shown)."""
        self._scaffold = sc if sc is not None else False

    def scaffold(self) -> Optional["Scaffold"]:
        """The task's scaffold in this target when the config asks for one and the task has a
        fusible region; None otherwise (the regime then asks for whole programs). Why there is
        none is recorded in the cell's notes."""
        if not self.config.scaffold:
            return None
        if self._scaffold is None:
            from kernelwright.scaffold import ScaffoldError, build

            try:
                sc = build(self.task, self.target, self.eval_run.size, device=self.eval_run.device)
                available, reason = sc.available, sc.reason
            except ScaffoldError as e:  # planning timed out
                available, reason = False, str(e)
            self.notes["scaffold"] = {"available": available, "reason": reason}
            self._scaffold = sc if available else False
            if not available:
                self.progress(NoScaffold(reason=reason))
        return self._scaffold or None

    # -- prompts -------------------------------------------------------------------------------

    @property
    def target(self) -> str:
        return self.config.target

    def system(self) -> str:
        return prompts.render("system", ambition=self.config.has("ambition"))

    def task_vars(self) -> dict[str, Any]:
        sc = self.scaffold()
        region = None
        if sc is not None:
            seg = sc.segment
            region = {"kernel_view": sc.kernel_view.strip("\n"), "variables": sc.variables,
                      "torch_lines": seg.torch_lines, "module_notes": seg.module_notes, "op_notes": seg.op_notes}
        return {"task_source": self.task.source.strip(), "target": self.target,
                "target_name": TARGET_NAMES[self.target], "ambition": self.config.has("ambition"),
                "scaffold": region, "fence": sc.language if sc is not None else "python"}

    def messages(self, user: str) -> tuple[ChatMessage, ...]:
        return (ChatMessage(role="system", content=self.system()), ChatMessage(role="user", content=user))

    # -- model calls ---------------------------------------------------------------------------

    def request(self, messages: tuple[ChatMessage, ...], n: int, temperature: float, max_tokens: int,
                seed: int, grammar: Optional[str] = None) -> GenerationRequest:
        """n samples of one conversation under the config's sampling settings (`grammar`: the
        language the answers are held to, where the backend can apply one)."""
        c = self.config
        return GenerationRequest(messages=messages, n=n, temperature=temperature, top_p=c.top_p, top_k=c.top_k,
                                 repeat_penalty=c.repeat_penalty, max_tokens=max_tokens, seed=seed, grammar=grammar)

    def draw(self, request: GenerationRequest) -> list[Completion]:
        [completions] = self.draw_many([request])
        return completions

    def draw_many(self, requests: list[GenerationRequest]) -> list[list[Completion]]:
        """Several requests in one backend call (a batching backend runs them together)."""
        started = time.monotonic()
        results = self.backend.generate(requests)
        for comp in (c for completions in results for c in completions):
            self.usage.prompt_tokens += comp.prompt_tokens
            self.usage.completion_tokens += comp.completion_tokens
        self.usage.latency_s += time.monotonic() - started
        return results

    def ask(self, role: str, user: str, turn: int, temperature: float = 0.0) -> str:
        """One text answer from a non-generating role (analyzer, researcher, feedback analyzer)."""
        self.progress(Asking(role=role, turn=turn))
        request = self.request(self.messages(user), 1, temperature, self.config.role_max_tokens,
                               self.config.seed + 1000 * turn + 7)
        text = self.draw(request)[0].text
        self.notes.setdefault("roles", []).append({"role": role, "turn": turn, "prompt": user, "answer": text})
        return text

    def candidates(self, user: str, turn: int, n: int, temperature: float,
                   notes: Optional[dict[str, Any]] = None) -> list[Attempt]:
        """n programs for one prompt: generated in one batched request, then each extracted,
        grounded and evaluated; every one is logged, whatever happens to it."""
        messages = self.messages(user)
        request = self.request(messages, n, temperature, self.config.max_tokens, self.config.seed + 1000 * turn)
        self.progress(Generating(turn=turn, n=n))
        started = time.monotonic()
        completions = self.draw(request)
        gen_s = (time.monotonic() - started) / max(1, len(completions))
        prepared = [self.prepare(c) for c in completions]
        results = self.evaluate_many([p.judged for p in prepared], turn)
        out = []
        for i, (comp, p, result) in enumerate(zip(completions, prepared, results)):
            attempt = self.record(messages, comp, p.code, p.grounding, result, turn, i, gen_s,
                                  {**(notes or {}), **p.notes})
            self.progress(Judged(turn=turn, sample=i, n=n, verdict=result.verdict.value, speedup=result.speedup,
                                 custom=result.custom_kernel))
            out.append(attempt)
        return out

    # -- the pipeline ----------------------------------------------------------------------------

    def prepare(self, comp: Completion) -> "Prepared":
        """One answer's program and grounding report: the answer's code block, or under a
        scaffold the answer spliced into the scaffold's region (the model's text stays in
        raw_response)."""
        sc = self.scaffold()
        extra: dict[str, Any] = {}
        if sc is not None:
            from kernelwright.scaffold import assemble

            assembly = assemble(sc, comp.text)
            code: Optional[str] = assembly.code
            extra["scaffold"] = assembly_note(sc, assembly)
        else:
            code = extract_code(comp.text)
            if self.config.scaffold:  # asked for, but this task has none: say so on every attempt
                extra["scaffold"] = {"available": False, "reason": self.notes.get("scaffold", {}).get("reason", "")}
        if code is None or self.config.has("no_grounding"):
            return Prepared(code, None, extra)
        from kernelwright.grounding.ground import ground

        return Prepared(code, ground(code, self.target), extra)

    def evaluate(self, code: str, run: Optional[EvalRun] = None) -> EvalResult:
        """One program judged by the run's executor, as `run` asks (default: the run's own)."""
        return self.executor.evaluate(self.task, code, run if run is not None else self.eval_run)

    def evaluate_many(self, codes: list[Optional[str]], turn: int) -> list[EvalResult]:
        """Programs judged side by side (config.eval_workers at once); None, an answer without
        code, is no_code without an evaluation."""
        def one(job: tuple[int, Optional[str]]) -> EvalResult:
            i, code = job
            self.progress(Evaluating(turn=turn, sample=i, n=len(codes)))
            if code is None:
                return EvalResult(verdict=Verdict.NO_CODE, error="no Python code in the answer", task_id=self.task.id,
                                  stages=[Stage(name="extract", seconds=0.0, ok=False)])
            return self.evaluate(code)

        workers = max(1, min(self.config.eval_workers, len(codes)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, enumerate(codes)))

    def record(self, messages: tuple[ChatMessage, ...], comp: Completion, code: Optional[str], grounding: Any,
               result: EvalResult, turn: int, sample: int, gen_s: float,
               notes: Optional[dict[str, Any]]) -> Attempt:
        """The Attempt of one answer (`comp`, asked with `messages`) and its verdict, kept in the
        run's attempts and passed to the sink."""
        attempt = self._attempt(messages, comp, code, grounding, result, turn, sample, gen_s, notes)
        self.attempts.append(attempt)
        self.sink(attempt)
        return attempt

    def _attempt(self, messages: tuple[ChatMessage, ...], comp: Completion, code: Optional[str], grounding: Any,
                 result: EvalResult, turn: int, sample: int, gen_s: float,
                 notes: Optional[dict[str, Any]]) -> Attempt:
        repaired = grounding.code if grounding is not None and grounding.changed else None
        evaluated = repaired or code
        msgs = [m.model_dump() for m in messages]
        return Attempt(
            id=f"{self.cell_key}/t{turn}/s{sample}",
            task_id=self.task.id,
            regime=self.config.spec,
            turn=turn,
            sample=sample,
            prompt_hash=hashlib.sha256(json.dumps(msgs, sort_keys=True).encode()).hexdigest()[:16],
            messages=msgs,
            raw_response=comp.text,
            finish_reason=comp.finish_reason,
            code=code,
            repaired_code=repaired,
            code_hash=sha256_text(evaluated) if evaluated else None,
            repairs=[r.model_dump() for r in grounding.repairs] if grounding is not None else [],
            grounding_findings=list(grounding.findings) if grounding is not None else [],
            eval=result,
            usage=Usage(prompt_tokens=comp.prompt_tokens, completion_tokens=comp.completion_tokens,
                        latency_s=comp.latency_s),
            wall_s=round(gen_s + sum(s.seconds for s in result.stages), 3),
            notes=dict(notes or {}),
        )


@dataclass(frozen=True)
class Prepared:
    """One answer made ready to judge: its program (None: no code in it), the grounding report
    (None: not grounded), and its notes for the Attempt (the scaffold's, where there is one)."""

    code: Optional[str]
    grounding: Any
    notes: dict[str, Any]

    @property
    def judged(self) -> Optional[str]:
        """What is evaluated: the repaired program where grounding ran, else the extracted one."""
        return self.grounding.code if self.grounding is not None else self.code


def assembly_note(sc: "Scaffold", assembly: Any) -> dict[str, Any]:
    """notes["scaffold"] of an answer spliced into `sc`: the region used and what was repaired."""
    # template_only: what verifies is the system's kernel, not the model's (an empty region, or a
    # lone GEMM whose template alone computes the output): Table I counts it apart
    return {"region": assembly.region, "repairs": assembly.repairs, "empty": assembly.empty,
            "kind": sc.segment.kind.value, "reason": sc.reason,
            "template_only": assembly.empty or sc.segment.pass_through}
