"""transformers, in-process: a hub id, a local folder, or a GGUF file (dequantised on load).

All samples of all requests that share sampling settings are generated together, left-padded,
`batch_size` rows at a time: on a GPU one batch of 8 costs little more than one sample.
`model.generate` takes one sampling setting and one RNG per call, so a seed makes a rerun of the
same requests give the same completions, but a sample's text depends on the batch it was in.

Grammars are not applied here: a GBNF logits processor over a batch needs a grammar engine
(xgrammar, llguidance) that is not a dependency. A request's grammar is ignored and every
Completion says `constrained=False`; on a GPU, constrained decoding goes through a vLLM or SGLang
server (openai backend, `?grammar=vllm|sglang`).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from itertools import groupby
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from kernelwright.llm import local_model
from kernelwright.llm.base import BackendError, Completion, GenerationRequest, check_counts, first_line

log = logging.getLogger(__name__)

DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16,
          "float32": torch.float32, "fp32": torch.float32}  # fmt: skip


def _dtype_kwarg() -> str:
    # transformers 4.56 renamed torch_dtype to dtype; older versions would ignore `dtype`
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def split_target(target: str) -> tuple[str, str | None]:
    """hf: target -> (model id or folder, GGUF file name inside it or None)."""
    if not target.endswith(".gguf"):
        return target, None
    path = Path(target)
    if path.exists():
        local_model.check_gguf(path)
        return str(path.parent), path.name
    repo, _, filename = target.rpartition("/")  # org/repo/file.gguf on the hub
    if repo.count("/") != 1:
        raise BackendError(f"GGUF file not found: {target} (a hub file is ORG/REPO/FILE.gguf)")
    return repo, filename


def _flag(value: str) -> bool:
    if value.lower() in ("", "1", "true", "yes", "on"):  # a bare `?keep_dequantized` means true
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def dequantized_dir(gguf: Path, dtype: str) -> Path:
    """Where the dequantised copy of a GGUF file is kept: keyed by its name, size and dtype."""
    size = gguf.stat().st_size
    return local_model.cache_dir() / "dequantized" / f"{gguf.stem}-{size}-{dtype}"


class TransformersBackend:
    # many requests in one generate() call cost little more than one (one GPU batch): a shared
    # caller gathers concurrent requests for it (llm/coalesce.py)
    batches_requests = True
    SPEC_OPTIONS = {"model": str, "dtype": str, "device": str, "batch_size": int, "keep_dequantized": _flag}

    def __init__(
        self,
        model_id: str,
        *,
        gguf_file: str | None = None,
        device: str | None = None,
        dtype: str = "bfloat16",
        batch_size: int = 8,
        model: str | None = None,
        keep_dequantized: bool | None = None,
    ) -> None:
        if dtype not in DTYPES:
            raise BackendError(f"transformers: unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
        if gguf_file:
            try:
                import gguf  # noqa: F401  transformers needs it to read GGUF, and says so less clearly
            except ImportError:
                raise BackendError(
                    "reading a GGUF file with transformers needs 'gguf': pip install kernelwright[hf]"
                ) from None
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.batch_size = max(1, batch_size)
        # Held around each batch, not the whole call (a study sets it to its device's lock, shared):
        # a call of many batches takes minutes on a GPU, and no evaluation could be timed there until
        # it ended (two studies on one H200 spent 1,626 s of their timed stages waiting).
        self.batch_guard: AbstractContextManager = nullcontext()
        self.model = model or (Path(gguf_file).stem if gguf_file else model_id)
        source: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
        # Dequantising a GGUF takes most of a minute (80 s for the 1.5B on the H200's host): the
        # result is kept once, as safetensors, and read back in seconds. On by default on a GPU.
        keep = self.device.startswith("cuda") if keep_dequantized is None else keep_dequantized
        local_gguf = Path(model_id) / gguf_file if gguf_file else None
        kept = dequantized_dir(local_gguf, dtype) if local_gguf is not None and local_gguf.is_file() and keep else None
        load_from = model_id
        if kept is not None and (kept / "config.json").is_file():
            load_from, source = str(kept), {}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(load_from, **source)
            self._lm = AutoModelForCausalLM.from_pretrained(load_from, **source, **{_dtype_kwarg(): DTYPES[dtype]})
        except (OSError, ValueError) as e:
            raise BackendError(f"transformers cannot load {model_id} {gguf_file or ''}: {first_line(e)}") from e
        if kept is not None and load_from == model_id:
            self._keep(kept)
        self.loaded_from = load_from
        self._lm.to(self.device).eval()
        self.tokenizer.padding_side = "left"  # decoder-only: new tokens must follow the prompt directly
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._stop_ids = self._end_of_turn_ids()

    def _keep(self, folder: Path) -> None:
        """Save the dequantised weights and tokenizer; a failure (a full disk) costs only the speed-up."""
        tmp: Path | None = None
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            for stale in folder.parent.glob(folder.name + ".tmp*"):  # left by a save that was killed
                if time.time() - stale.stat().st_mtime > 3600:
                    shutil.rmtree(stale, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=folder.name + ".tmp"))
            # save_pretrained refuses a model read from a GGUF ("not serializable"), but its
            # weights are plain tensors by now: the config plus one safetensors file is a model
            # folder from_pretrained reads (safetensors' save_model drops tied duplicates)
            from safetensors.torch import save_model

            self._lm.config.save_pretrained(tmp)
            self._lm.generation_config.save_pretrained(tmp)
            save_model(self._lm, str(tmp / "model.safetensors"))
            self.tokenizer.save_pretrained(tmp)
            tmp.rename(folder)  # atomic: a reader sees the whole folder or none
        except (OSError, ValueError, RuntimeError) as e:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            if not (folder / "config.json").is_file():  # else another process kept it first: fine
                log.warning("could not keep the dequantised model in %s (%s); the next load dequantises again",
                            folder, first_line(e))

    @classmethod
    def from_spec(cls, target: str, options: Mapping[str, str]) -> TransformersBackend:
        from kernelwright.llm.registry import take_options

        model_id, gguf_file = split_target(target)
        return cls(model_id, gguf_file=gguf_file, **take_options(options, cls.SPEC_OPTIONS, "hf"))

    def _end_of_turn_ids(self) -> list[int]:
        """The eos of the generation config and of the tokenizer, plus the chat end-of-turn token:
        a GGUF-derived config may name only <|endoftext|>, while the chat turn ends with <|im_end|>."""
        ids: set[int] = set()
        eos = self._lm.generation_config.eos_token_id
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        for token in ("<|im_end|>", "<|eot_id|>", "<|end|>"):
            tid = self.tokenizer.convert_tokens_to_ids(token)
            if isinstance(tid, int) and tid != self.tokenizer.unk_token_id:
                ids.add(tid)
        return sorted(ids)

    def _generation_config(self, req: GenerationRequest) -> GenerationConfig:
        common: dict[str, Any] = dict(
            max_new_tokens=req.max_tokens, pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self._stop_ids, repetition_penalty=req.repeat_penalty,
        )  # fmt: skip
        if req.greedy:
            return GenerationConfig(do_sample=False, **common)
        return GenerationConfig(
            do_sample=True, temperature=req.temperature, top_p=req.top_p, top_k=req.top_k or None, **common
        )

    def _prompt(self, req: GenerationRequest) -> str:
        return self.tokenizer.apply_chat_template(req.messages_as_dicts(), tokenize=False, add_generation_prompt=True)

    @torch.inference_mode()
    def _run_batch(self, prompts: list[str], config: GenerationConfig, seed: int | None) -> list[Completion]:
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        if seed is not None:
            torch.manual_seed(seed)
        start = time.perf_counter()
        out = self._lm.generate(**enc, generation_config=config)
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        latency = time.perf_counter() - start
        new = out[:, enc["input_ids"].shape[1] :].tolist()
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        stops = set(self._stop_ids)
        completions = []
        for tokens, prompt_len in zip(new, prompt_lens, strict=True):
            end = next((i for i, t in enumerate(tokens) if t in stops), None)
            kept = tokens if end is None else tokens[:end]
            completions.append(
                Completion(
                    text=self.tokenizer.decode(kept, skip_special_tokens=True),
                    finish_reason="length" if end is None else "stop",
                    prompt_tokens=int(prompt_len),
                    completion_tokens=len(kept),
                    latency_s=latency,
                )  # fmt: skip
            )
        return completions

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        prompts = [self._prompt(r) for r in requests]
        # one row per sample; rows that share sampling settings can share a batch
        rows = [(i, s) for i, r in enumerate(requests) for s in range(r.n)]

        def settings(row: tuple[int, int]) -> tuple:
            r = requests[row[0]]
            return (r.greedy, r.temperature, r.top_p, r.top_k, r.repeat_penalty, r.max_tokens)

        rows.sort(key=lambda row: (settings(row), len(prompts[row[0]])))  # similar lengths pad less
        results: list[list[Completion | None]] = [[None] * r.n for r in requests]
        for _, group in groupby(rows, key=settings):
            group = list(group)
            for b in range(0, len(group), self.batch_size):
                batch = group[b : b + self.batch_size]
                first = requests[batch[0][0]]
                seed = first.sample_seed(batch[0][1])
                with self.batch_guard:
                    done = self._run_batch([prompts[i] for i, _ in batch], self._generation_config(first), seed)
                for (i, s), completion in zip(batch, done, strict=True):
                    results[i][s] = completion
        final = [[c for c in row if c is not None] for row in results]
        check_counts(requests, final, f"transformers {self.model}")
        return final
