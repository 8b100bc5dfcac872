"""`invoke train`: the learned parts (participatory scorer, tension balancer) fitted on scenes with
ground truth, and the scenes themselves.

Uses only `relevance`; nothing but the command line uses it.
"""
