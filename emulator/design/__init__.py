"""A storage design as an architect describes it, read once by ``run``, ``simulate`` and ``tune``.

- ``spec``   the ``design:`` config section: the modelled job, each node's local device and
             link, the global storage all nodes share, in vendors' units (7GB/s, 400Gb/s, 3.84TB)
- ``share``  what one node gets of a shared link when k nodes transfer at once, and the tier
             emulation a run needs to behave as one node of the design
"""
