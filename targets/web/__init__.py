"""web: a self-contained static site running the ONNX models in the browser (onnxruntime-web), checked
in headless Chromium.
"""
