"""What is checkpointed, in memory.

- ``state``    a rank's tensors sized by the MLPerf formulas, snapshot, adopt after a restore
- ``content``  unique, incompressible bytes (or a chosen reducibility), re-keyed per step
- ``staging``  the host staging copy: CPU memmove or CUDA side stream, pinned buffers, buckets
- ``device``   ``state.device`` resolved on this machine
"""
