# Source on the device machine (see docs/results/*-h200.md): the carried wheels (pydantic etc. are
# not in the device image) into /tmp/site, the package from this checkout, caches under /tmp.
if [ ! -f /tmp/site/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && touch /tmp/site/.done
fi
export PYTHONPATH=/tmp/site:$PWD KERNELWRIGHT_CACHE=/tmp/kwcache
mkdir -p /tmp/kwcache/models /tmp/kwout
