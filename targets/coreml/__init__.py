"""coreml: `.mlpackage` files, checked by structure and by a NumPy evaluator of their MIL program
(Apple's runtime needs macOS).
"""
