"""tensorrt: serialized plans built from the verified ONNX models with TensorRT's own Python API
(full TensorRT or TensorRT-RTX).
"""
