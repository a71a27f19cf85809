"""Child side of ``scaffold.plan_task`` / ``plan_tasks``: a ``PlanJob`` (or a ``PlanBatch``) as JSON on
stdin, one JSON line on stdout (one reply, or ``{"ok": true, "replies": [...]}`` in job order)."""

from __future__ import annotations

import sys

from kernelwright.child import child_main, load_task_module, one_line


def handle(text: str) -> dict:
    import json

    from kernelwright.scaffold.planner_job import PlanBatch, PlanJob

    data = json.loads(text)
    if "jobs" not in data:
        return plan_one(PlanJob.model_validate(data))
    replies = []
    for job in PlanBatch.model_validate(data).jobs:
        try:
            replies.append(plan_one(job))
        except Exception as e:  # a bug of ours on one task: the others still get their plans
            replies.append({"ok": False, "stage": "internal", "error": one_line(e)})
    return {"ok": True, "replies": replies}


def plan_one(job) -> dict:
    from kernelwright.analysis.shapes import fake_inputs, fake_mode
    from kernelwright.measure.draw import seed_all
    from kernelwright.scaffold.compose import plan

    try:
        module = load_task_module(job.source, job.path or f"<{job.task_id}>", "kernelwright_scaffold_task")
        missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
        if missing:
            return {"ok": False, "stage": "load", "error": f"the task source defines no {missing[0]}"}
        seed_all(job.seed)
        # on the CPU, whatever device the task runs on: the inputs are fake (shapes only) and the
        # values the plan checks are a reduced run's (reduce.py), so no full-size tensor is allocated
        model = module.Model(*module.get_init_inputs())
        inputs = fake_inputs(module.get_inputs, job.seed, fake_mode())
    except Exception as e:  # the task's own code failed: one line for the caller
        return {"ok": False, "stage": "load", "error": one_line(e)}
    result = plan(job.task_id, module, model, inputs, job.source, job.seed)
    return {"ok": True, "plan": result.model_dump(mode="json")}


if __name__ == "__main__":
    sys.exit(child_main(handle))
