"""text-encoder: the checkpoint's query encoder as its own artifact (all-MiniLM-L6-v2 for our
checkpoints, arr-coc-0-1's Qwen3-VL token-embedding mean for reference ones).
"""
