// One batch-1 result of a model, whatever runtime produced it (CoreML on the phone; golden.bin).
struct Prediction {
    let relevance: [Float]      // num_patches scores in [0, 1], row-major (row * grid + col)
    let topk: [Int]             // top_k patch indices
    let weights: [Float]        // information, perspectival, participatory
    let evidence: [Float]       // how strongly the query matched (contract model.evidence_names), before min-max
}
