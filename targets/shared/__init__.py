"""Helpers shared by several targets, where their users can see them: ONNX sessions and export
(onnx, onnx-int8, text-encoder, web, tensorrt) and the mobile contract (android, ios, web presets).
"""
