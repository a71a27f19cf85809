"""When a median below the physical floor of a call is a cheat (timing.below_floor applies these).

Light on purpose (no torch): the judge and the worker import it before anything else.
"""

# Below these floors (ms) call overheads dominate, and the bandwidth floor says nothing.
CPU_MIN_FLOOR_MS = 0.05
GPU_MIN_FLOOR_MS = 0.005
# A median below this share of the floor is a cheat. The CPU's figure is a copy measured once on a
# possibly shared machine (and a copy's write-allocate traffic is uncounted, so a read-mostly kernel
# can beat it by ~1.5x): a wider margin there. The GPU's is the peak table's measured figure.
CPU_FLOOR_MARGIN = 0.25
GPU_FLOOR_MARGIN = 0.5
