"""The model and what defines it: the ARR-COC relevance model written for export, arr-coc-0-1's
reference semantics (the oracle tests hold the model to), checkpoints, and the two query encoders.

The bottom layer: imports nothing else of pipeline/ but `arrcoc_edge.errors`. A change to what a
checkpoint computes starts here, with a test against `reference.py`.
"""
