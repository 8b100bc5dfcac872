"""Running a build: the checkpoint exported once, each target's stage, its gate, then one publish;
and merging folders built on several hosts into one publish.

Receives the target table from the caller: names no target itself.
"""
