"""Writes tests/data/tiny.pte: a 6 KB ExecuTorch program (XNNPACK-delegated Linear, softmax, top-k;
uint8 photo and float32 query in, float32 and int64 out, dynamic batch 1..8) for the fast tests of
the C++ runner (tests/test_et_runner.py). Lowering even this takes minutes on a busy 2-core host,
so the file is kept; run this again after an executorch upgrade:
    .venv/bin/python tests/data/make_tiny_pte.py
"""
from pathlib import Path

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch.export import Dim


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(12, 16)

    def forward(self, image, query):
        colour = image.float().mean(dim=(1, 2))  # [B, 3]
        h = self.lin(colour.repeat(1, 4) * 0.01) + query.sum(1, keepdim=True)
        return torch.softmax(h, 1), torch.topk(h, 4).indices


example = (torch.randint(0, 255, (2, 8, 8, 3), dtype=torch.uint8), torch.randn(2, 5))
batch = Dim("b", min=1, max=8)
program = torch.export.export(Tiny().eval(), example, dynamic_shapes={"image": {0: batch}, "query": {0: batch}})
edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
Path(__file__).with_name("tiny.pte").write_bytes(edge.to_executorch().buffer)
