"""Task loading and the built-in task suite.

A task is a KernelBench-format Python file: ``class Model(nn.Module)``, ``get_inputs()``,
``get_init_inputs()`` and module-level size constants. ``load_tasks(spec)`` accepts:

* ``path/to/task.py`` - one task (origin ``file``, id = the file stem, no level);
* ``path/to/folder`` - every ``*.py`` task in it, sorted by file name (``__init__.py`` and
  helper files that define none of the three names are skipped);
* ``kernelbench:<root>[:<levels>[:<ids>]]`` - problems ``<root>/KernelBench/level{N}/{ID}_{Name}.py``
  of a KernelBench checkout (``<root>`` may also be the inner ``KernelBench`` folder), with ids
  ``kernelbench/L{N}/{ID}``; e.g. ``kernelbench:/data/KernelBench:1:1-10`` or ``kernelbench:/x:1,2:1-5,7``;
* ``builtin`` (the whole suite), ``builtin:<levels>[:<ids>]`` (ids are the ``NN`` file prefixes),
  or one built-in task by id ``builtin/L1/03_softmax``, file stem ``03_softmax`` or name ``softmax``.

Selectors are comma-separated numbers and inclusive ranges (``1-5,7``); empty or ``*`` means all.
Files are checked by parsing them (never importing: task code runs only in the evaluator's
sandbox), and ``Task.source`` holds the full text. Any bad input raises ``TaskError`` with a
one-line message. ``load_task(spec)`` returns exactly one task or raises ``TaskError``.
``resolve_tasks(specs)`` is the lenient form a study uses: a broken file in a folder or KernelBench
selection is a ``TaskFailure`` (a failed cell) instead of an error for the whole selection.

Size switch: every built-in task has two sizes, chosen when its source is *executed* (so in the
evaluator's process, not at load time) by the environment variable ``KERNELWRIGHT_SIZE``
(exported here as ``SIZE_ENV``):

* ``small`` (the default when unset) - inputs, construction and one forward run in well under a
  second on a 2-core CPU; for tests and CPU smoke runs;
* ``full`` - realistic GPU sizes (tens of MB to a few GB, under ~8 GB per task) for timing on an
  H200-class device.

Any other value is treated as ``small`` (with a logged warning when built-in tasks are loaded).
"""

from kernelwright.tasks.builtin import SIZE_ENV, SIZES, SUITE_DIR
from kernelwright.tasks.errors import TaskError
from kernelwright.tasks.loader import TaskFailure, TaskOrFailure, load_task, load_tasks, resolve_tasks, task_number

__all__ = ["SIZE_ENV", "SIZES", "SUITE_DIR", "TaskError", "TaskFailure", "TaskOrFailure", "load_task", "load_tasks",
           "resolve_tasks", "task_number"]
