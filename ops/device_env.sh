# Sourced on the device machine (ops/README.md): the carried wheels into /tmp/site, the
# package from this checkout, caches under /tmp. The device image lacks pydantic (+ pydantic_core,
# annotated_types, typing_*), gguf, bm25s and PyStemmer (cp312 wheel): `pip download` them into
# .whl/ here (git-ignored) and carry it with the first call; `gputests` also needs pytest, pluggy,
# iniconfig, pytest-xdist, execnet and pytest-timeout there (py3-none-any wheels).
if [ ! -f /tmp/site/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && touch /tmp/site/.done
fi
export PYTHONPATH=/tmp/site:$PWD KERNELWRIGHT_CACHE=/tmp/kwcache
mkdir -p /tmp/kwcache/models /tmp/kwout
