#!/usr/bin/env bash
# onnxruntime-web for the web target (the build vendors its WASM files).
exec bash "$(dirname "$0")/../npm_ci.sh" web node_modules/onnxruntime-web/dist/ort-wasm-simd-threaded.wasm "the web target"
