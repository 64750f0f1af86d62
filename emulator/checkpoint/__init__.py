"""One rank's checkpoint I/O: what a save, a drain and a restore do to the tiers.

- ``checkpointer``  the sync/async pipeline: snapshot, local write, drain, global commit, retention
- ``drainer``       a node's drain to the global tier: bounded concurrency, verification, retries
- ``resume``        draining what a crashed run left complete locally but not globally
- ``restore``       nearest-tier restore with fallback, verified before it is adopted
- ``layout``        names, manifests, completeness, retention
- ``integrity``     CRC32C while writing and reading; refusing short writes
- ``audit``         sampling the written files: are the bytes really irreducible?
- ``records``       typed receipts, checkpoint and load records, a rank's result
- ``retry``         the retry policy and the error classes it relies on
- ``loop``          the pipeline's event-loop thread
- ``injection``     injected faults at named phases: kills, the global outage, corruption
- ``node_loss``     the emulated loss of a node's local tier
- ``tally``         per-process fault counts
"""
