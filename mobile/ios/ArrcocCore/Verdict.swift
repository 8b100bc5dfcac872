// The answer in a few words: whether what the query asks for is in the photo. The model's `evidence`
// output (contract.json model.evidence_names: the participatory map before any min-max) goes through
// the calibration the build fitted on labelled natural photos (calibration.json, carried in
// contract.json's `calibration`) to a confidence, exactly as arrcoc_edge/relevance/evidence.py's
// Calibration computes it. No calibration: no number, and the verdict says so.
// Foundation only: CoreTests hold it to Python's numbers (tests/test_ios.py runs them).
import Foundation

/// confidence = 1 / (1 + exp(-(bias + coef . evidence))), fitted for one checkpoint.
struct Calibration: Decodable {
    static let fileName = "calibration.json"
    static let format = "arrcoc-edge/confidence-calibration/1"

    let format: String
    let model: String
    let features: [String]
    let coef: [Double]
    let bias: Double

    /// Refuses a calibration of other evidence than the model's (`names`), or not a logistic one.
    func checked(names: [String]) throws -> Calibration {
        guard format == Calibration.format, model == "logistic", features == names, coef.count == names.count,
              coef.allSatisfy(\.isFinite), bias.isFinite else {
            throw AppError.badContract("calibration is not a \(Calibration.format) logistic calibration of \(names)")
        }
        return self
    }

    func confidence(_ evidence: [Float]) -> Double {
        var z = bias
        for (c, e) in zip(coef, evidence) { z += c * Double(e) }
        return 1 / (1 + exp(-Swift.min(60, Swift.max(-60, z))))
    }
}

enum Verdict {
    /// confidence at or above this: what the query asks for is more likely there than not.
    static let standsOut = 0.5
    static let noCalibration = "no calibration in this folder"

    static func confidence(_ p: Prediction, _ calibration: Calibration?) -> Double? {
        guard let c = calibration, p.evidence.count == c.coef.count else { return nil }
        return c.confidence(p.evidence)
    }

    /// 0.873 -> "87%"; never "0%" or "100%" for a probability strictly between them.
    static func percent(_ v: Double) -> String {
        let shown = Int((100 * v).rounded(.toNearestOrAwayFromZero))
        if shown == 0 && v > 0 { return "<1%" }
        if shown == 100 && v < 1 { return ">99%" }
        return "\(shown)%"
    }

    /// The verdict line, as `invoke predict` says it.
    static func text(_ p: Prediction, _ calibration: Calibration?) -> String {
        guard let c = confidence(p, calibration) else { return "confidence unknown: \(noCalibration)" }
        return c >= standsOut ? "stands out: confidence \(percent(c))"
            : "nothing in this photo stands out: confidence \(percent(c))"
    }

    /// The cells the answer rests on: the strongest share of the grid (signature.strongest_cells),
    /// most relevant first, from the top-K.
    static func strongestCells(_ p: Prediction, numPatches: Int, share: Double) -> [Int] {
        let n = Swift.min(numPatches, Swift.max(1, Int((Double(numPatches) * share).rounded(.toNearestOrEven))))
        let picks = p.topk.filter { $0 >= 0 && $0 < numPatches }
        return Array(picks.enumerated().sorted { a, b in
            p.relevance[a.element] != p.relevance[b.element] ? p.relevance[a.element] > p.relevance[b.element] : a.offset < b.offset
        }.map(\.element).prefix(n))
    }
}
