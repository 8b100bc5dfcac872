"""onnx-int8: static QDQ quantisation of the verified FP32 ONNX model, chosen by measurement, plus
ORT-format copies for ONNX Runtime Mobile.
"""
